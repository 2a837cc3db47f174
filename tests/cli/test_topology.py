"""The topology view: structure of the diagram and the summary, from node-list fixtures."""

from __future__ import annotations

import re
from pathlib import Path

from cli import main as cli
from cli import topology
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "nodes"


def _edges(diagram: str) -> set[tuple[str, str]]:
    return set(re.findall(r"^\s+(\w+) --> (\w+)$", diagram, flags=re.M))


def _labels(diagram: str) -> dict[str, str]:
    return dict(re.findall(r'^\s+(\w+)\["(.*)"\]$', diagram, flags=re.M))


def test_full_labels_give_cluster_then_three_layers_then_nodes():
    d = topology.mermaid(topology.load(FIXTURES / "full_labels.json"))
    assert d.startswith("flowchart TD\n")
    edges, labels = _edges(d), _labels(d)
    l1 = [i for i in labels if i.startswith("l1_")]
    assert l1 == ["l1_nn_1a"] and ("cluster", "l1_nn_1a") in edges
    # layer-2 under layer-1, layer-3 under layer-2, nodes under layer-3
    assert ("l1_nn_1a", "l2_nn_1a__nn_2a") in edges and ("l1_nn_1a", "l2_nn_1a__nn_2b") in edges
    assert ("l2_nn_1a__nn_2a", "l3_nn_1a__nn_2a__nn_3a") in edges
    assert ("l3_nn_1a__nn_2a__nn_3a", "node_hyperpod_i_0a1") in edges
    assert labels["node_hyperpod_i_0a3"] == "hyperpod-i-0a3<br/>ml.p5.48xlarge<br/>Unschedulable"
    assert "untopo" not in labels
    # every node appears exactly once, under exactly one parent
    parents = [child for _, child in edges if child.startswith("node_")]
    assert sorted(parents) == sorted(set(parents)) and len(parents) == 4


def test_nodes_without_complete_labels_are_grouped_not_dropped():
    d = topology.mermaid(topology.load(FIXTURES / "partial_labels.json"))
    edges, labels = _edges(d), _labels(d)
    assert labels["untopo"] == topology.NO_TOPOLOGY and ("cluster", "untopo") in edges
    assert ("untopo", "node_hyperpod_i_0c1") in edges  # only layer-1 known
    assert ("untopo", "node_hyperpod_i_0d1") in edges  # a non-topology instance type
    assert len([c for _, c in edges if c.startswith("node_")]) == 4


def test_ids_are_sanitized_and_labels_escaped_so_the_diagram_renders():
    d = topology.mermaid(topology.load(FIXTURES / "partial_labels.json"))
    for node_id in _labels(d):
        assert re.fullmatch(r"\w+", node_id) and node_id.isascii()
    assert "weird#quot;name#lt;x#gt;" in d
    assert '"weird"' not in d


def test_empty_cluster_is_just_the_cluster():
    d = topology.mermaid(topology.load(FIXTURES / "empty.json"))
    assert d == 'flowchart TD\n  cluster["HyperPod cluster"]\n'
    assert topology.summary_text([]) == "no nodes\n"


def test_summary_counts_nodes_schedulable_and_gpus_per_layer_3():
    rows = topology.summary(topology.load(FIXTURES / "full_labels.json"))
    by_l3 = {r["layers"][2]: r for r in rows}
    assert by_l3["nn-3a"]["nodes"] == 3 and by_l3["nn-3a"]["schedulable"] == 2 and by_l3["nn-3a"]["gpus"] == 24
    assert by_l3["nn-3b"]["nodes"] == 1
    text = topology.summary_text(topology.load(FIXTURES / "full_labels.json"))
    assert text.splitlines()[-1] == "largest job with required topology at layer 3: 2 node(s)"


def test_summary_puts_unlabelled_nodes_in_their_own_row():
    rows = topology.summary(topology.load(FIXTURES / "partial_labels.json"))
    (unplaced,) = [r for r in rows if r["layers"][2] is None]
    assert unplaced["nodes"] == 2 and unplaced["gpus"] == 8


def test_cli_writes_a_self_contained_html_page_and_markdown(tmp_path, capsys):
    out = tmp_path / "topology.html"
    assert cli.main(["topology", "--from", str(FIXTURES / "full_labels.json"), "--format", "html", "--output", str(out)]) == 0
    page = out.read_text()
    assert '<div class="group degraded"' in page and "hyperpod-i-0a3: Unschedulable" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page  # nothing to fetch or run
    assert cli.main(["topology", "--from", str(FIXTURES / "full_labels.json"), "--format", "markdown"]) == 0
    assert "| nn-3a | nn-2a | 2 / 3 | 24 |" in capsys.readouterr().out


def test_cli_summary_and_missing_file_errors(capsys):
    assert cli.main(["topology", "--from", str(FIXTURES / "full_labels.json"), "--summary"]) == 0
    assert "nn-3a" in capsys.readouterr().out
    assert cli.main(["topology", "--from", "/nonexistent.json"]) == 2
    assert capsys.readouterr().err.startswith("error: --from /nonexistent.json:")
