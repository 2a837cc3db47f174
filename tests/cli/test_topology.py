"""The topology view: structure of the diagram and the summary, from node-list fixtures and from
node and pod dumps of 66 and 258 nodes made in the test (tests/cli/cluster_dumps.py): what can
run work, the GPUs free on it, and output that stays drawable at hundreds of nodes."""

from __future__ import annotations

import json
import re

import pytest

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
    assert labels["node_hyperpod_i_0a3"] == "hyperpod-i-0a3<br/>ml.p5.48xlarge<br/>health Unschedulable"
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
    # GPUs of the nodes that can run work only: the unschedulable third node's 8 do not count.
    assert by_l3["nn-3a"]["nodes"] == 3 and by_l3["nn-3a"]["schedulable"] == 2 and by_l3["nn-3a"]["gpus"] == 16
    assert by_l3["nn-3a"]["free_gpus"] is None  # no pod list read: free is not known
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
    assert '<div class="group degraded"' in page and "hyperpod-i-0a3: health Unschedulable" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page  # nothing to fetch or run
    assert cli.main(["topology", "--from", str(FIXTURES / "full_labels.json"), "--format", "markdown"]) == 0
    assert "| nn-3a | nn-2a | 2 / 3 | 16 |" in capsys.readouterr().out


def test_cli_summary_and_missing_file_errors(capsys):
    assert cli.main(["topology", "--from", str(FIXTURES / "full_labels.json"), "--summary"]) == 0
    assert "nn-3a" in capsys.readouterr().out
    assert cli.main(["topology", "--from", "/nonexistent.json"]) == 2
    assert capsys.readouterr().err.startswith("error: --from /nonexistent.json:")


# -- what can run work, and the GPUs free on it (dumps made in the test) ------------------------

from tests.cli.cluster_dumps import cluster  # noqa: E402


def _nodes(count: int):
    dumps = cluster(count)
    return dumps, topology.parse_nodes(dumps.nodes, dumps.pods)


def test_the_labels_and_resources_read_are_the_hyperpod_clis():
    # The HyperPod CLI (sagemaker-hyperpod, installed) reads the same health label, counts only
    # "Schedulable" nodes' accelerators, and reads the same two device resources: its constants
    # module, read as text (importing the CLI needs the kubernetes client).
    import ast
    from importlib.metadata import distribution

    source = distribution("sagemaker-hyperpod").locate_file("sagemaker/hyperpod/cli/constants/command_constants.py").read_text()
    hp = {t.id: n.value.value for n in ast.parse(source).body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
          for t in n.targets if isinstance(t, ast.Name)}
    assert topology.HEALTH_LABEL == hp["HP_HEALTH_STATUS_LABEL"]
    assert {hp["NVIDIA_GPU_RESOURCE_LIMIT_KEY"], hp["NEURON_RESOURCE_LIMIT_KEY"]} <= set(topology.ACCELERATOR_RESOURCES)


@pytest.mark.parametrize("count", [66, 258])
def test_only_healthy_ready_uncordoned_untainted_nodes_are_schedulable(count):
    dumps, nodes = _nodes(count)
    assert {n.name for n in nodes if n.schedulable} == dumps.schedulable
    why = {n.name: n.state for n in topology.unhealthy(nodes)}
    assert set(why) == set(dumps.kinds)
    expected = {
        "replacement": "health UnschedulablePendingReplacement",
        "cordoned": "cordoned",
        "notready": "NotReady",
        "unreachable": "NotReady (Unknown), taint node.kubernetes.io/unreachable:NoExecute/NoSchedule",
    }
    assert all(why[name] == expected[kind] for name, kind in dumps.kinds.items())
    rows = topology.summary(nodes)
    assert sum(r["schedulable"] for r in rows) == len(dumps.schedulable)
    assert topology.largest_required_job(rows) == max(
        sum(1 for n in nodes if n.schedulable and n.layers[2] == l3) for l3 in {n.layers[2] for n in nodes if n.placed})


@pytest.mark.parametrize("count", [66, 258])
def test_free_gpus_are_allocatable_less_what_unfinished_pods_on_the_node_request(count):
    dumps, nodes = _nodes(count)
    assert {n.name: n.free_gpus for n in nodes if n.schedulable} == dumps.free
    assert all(n.free_gpus == 0 for n in topology.unhealthy(nodes))  # a broken node's GPUs are not free
    rows = topology.summary(nodes)
    assert sum(r["gpus"] for r in rows) == 8 * len(dumps.schedulable)
    assert sum(r["free_gpus"] for r in rows) == sum(dumps.free.values())
    text = topology.summary_text(nodes)
    assert (f"{count} nodes: {len(dumps.schedulable)} schedulable, {len(dumps.kinds)} not schedulable; "
            f"{8 * len(dumps.schedulable)} GPUs on schedulable nodes, {sum(dumps.free.values())} free") in text


def test_a_taint_the_work_tolerates_does_not_take_a_node_out():
    doc = {"items": [{"metadata": {"name": "n1", "labels": {topology.HEALTH_LABEL: "Schedulable"}},
                      "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
                      "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}]}
    (tainted,) = topology.parse_nodes(doc)
    assert tainted.state == "taint dedicated=gpu:NoSchedule"
    (tolerated,) = topology.parse_nodes(doc, tolerated=("dedicated",))
    assert tolerated.schedulable


def _boxes(diagram: str) -> dict[str, str]:
    return {i: label for i, label in _labels(diagram).items() if i.startswith("l3_") or i == "untopo"}


def test_the_default_diagram_is_one_box_per_layer_3_past_32_nodes_and_every_node_on_request():
    dumps, nodes = _nodes(66)
    d = topology.mermaid(nodes)
    assert d.startswith("flowchart LR\n")  # the layer-3 boxes in a column, not a strip
    assert not [i for i in _labels(d) if i.startswith("node_")]  # no box per node
    rows = topology.summary(nodes)
    assert len(_boxes(d)) == len(rows)  # one per layer-3 network node, and one for the unlabelled
    (row,) = [r for r in rows if r["layers"][2] == "nn-3-0000"]
    assert _labels(d)["l3_nn_1_0__nn_2_000__nn_3_0000"] == (
        f"layer-3: nn-3-0000<br/>{row['schedulable']}/4 schedulable<br/>{row['gpus']} GPUs, {row['free_gpus']} free")
    marked = set(re.search(r"^\s+class (\S+) degraded$", d, flags=re.M).group(1).split(","))
    assert marked == {i for i, label in _boxes(d).items() if not re.search(r"<br/>(\d+)/\1 schedulable", label)}
    full = topology.mermaid(nodes, full=True)
    assert len([i for i in _labels(full) if i.startswith("node_")]) == 66
    assert topology.mermaid(nodes[: topology.FULL_TREE_MAX_NODES]).count('["hyperpod-i-') == topology.FULL_TREE_MAX_NODES


def test_the_diagram_at_256_nodes_is_within_mermaids_default_limits():
    # Mermaid's config schema (mermaid-js/mermaid, packages/mermaid/src/schemas/config.schema.yaml):
    # maxTextSize default 50000, maxEdges default 500.
    assert (topology.MAX_MERMAID_TEXT, topology.MAX_MERMAID_EDGES) == (50_000, 500)
    _, nodes = _nodes(258)
    d = topology.mermaid(nodes)
    assert len(d) < topology.MAX_MERMAID_TEXT / 2 and d.count(" --> ") < topology.MAX_MERMAID_EDGES
    assert topology.mermaid_too_big(d) is None
    big = topology.mermaid(_nodes(600)[1], full=True)
    assert "leave out --full" in topology.mermaid_too_big(big)


def test_cli_reads_pods_beside_the_nodes_and_refuses_a_bad_pod_dump(tmp_path, capsys):
    dumps = cluster(66)
    (tmp_path / "nodes.json").write_text(json.dumps(dumps.nodes))
    (tmp_path / "pods.json").write_text(json.dumps(dumps.pods))
    args = ["topology", "--from", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json")]
    assert cli.main(args + ["--summary"]) == 0
    assert f"{sum(dumps.free.values())} free" in capsys.readouterr().out
    assert cli.main(args + ["--full"]) == 0
    assert capsys.readouterr().out.count('["hyperpod-i-') == 66
    (tmp_path / "odd.json").write_text('{"items": [{"spec": {"nodeName": "x", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "lots"}}}]}}]}')
    for bad, says in (("odd.json", "not a pod list"), ("missing.json", "[Errno 2]")):
        assert cli.main(["topology", "--from", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and f"--pods {tmp_path / bad}" in err and says in err


def test_without_dumps_it_reads_nodes_and_pods_from_the_current_kubectl_context(tmp_path, capsys, monkeypatch):
    dumps = cluster(66)
    (tmp_path / "nodes.json").write_text(json.dumps(dumps.nodes))
    (tmp_path / "pods.json").write_text(json.dumps(dumps.pods))
    kubectl = tmp_path / "bin" / "kubectl"  # answers `get nodes -o json` and `get pods -A -o json` as kubectl does
    kubectl.parent.mkdir()
    kubectl.write_text(f'#!/bin/sh\ncase "$*" in\n  "get nodes -o json") cat {tmp_path}/nodes.json ;;\n'
                       f'  "get pods -A -o json") cat {tmp_path}/pods.json ;;\n  *) echo "unexpected: $*" >&2; exit 1 ;;\nesac\n')
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{kubectl.parent}:/usr/bin:/bin")
    assert cli.main(["topology", "--summary"]) == 0
    assert f"{sum(dumps.free.values())} free" in capsys.readouterr().out


def test_a_node_list_without_conditions_says_why_nothing_is_schedulable():
    # A trimmed or hand-written dump: the Ready condition lives in status.conditions (Kubernetes' Node API), and
    # without it no node is known to be Ready.
    doc = {"items": [{"metadata": {"name": f"n{i}", "labels": {topology.HEALTH_LABEL: "Schedulable"}},
                      "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for i in range(2)]}
    nodes = topology.parse_nodes(doc, None)
    assert not [n for n in nodes if n.schedulable]
    assert ("2 nodes: 0 schedulable, 2 not schedulable (2 of them with no Ready condition in the node list: without "
            "status.conditions a node is not known to be Ready, so it counts as not schedulable)") in topology.summary_text(nodes)
