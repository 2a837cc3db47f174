"""The cluster's EC2 network topology, from a node list: a page grouped by layer-3 network
node, a Markdown summary for pull requests, a plain summary, or a Mermaid diagram.

Input is what `kubectl get nodes -o json` prints. EC2 labels each node with the network
nodes above it (`topology.k8s.aws/network-node-layer-1..3`, layer 1 the farthest);
HyperPod adds the instance type and its health status. A required-topology job of N
nodes fits only under one layer-3 network node with at least N schedulable nodes.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from infra import catalogue

LAYER_LABELS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3))
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
TYPE_LABEL = "node.kubernetes.io/instance-type"
NO_TOPOLOGY = "Nodes without complete topology labels"


@dataclass(frozen=True)
class Node:
    name: str
    instance_type: str
    health: str
    layers: tuple[str | None, str | None, str | None]
    gpus: int

    @property
    def placed(self) -> bool:
        return all(self.layers)


def parse_nodes(doc: dict) -> list[Node]:
    nodes = []
    for item in doc.get("items", []):
        labels = item.get("metadata", {}).get("labels", {}) or {}
        itype = labels.get(TYPE_LABEL, labels.get("beta.kubernetes.io/instance-type", "unknown"))
        capacity = item.get("status", {}).get("capacity", {}) or {}
        spec = catalogue.lookup(itype)
        gpus = int(capacity.get("nvidia.com/gpu", capacity.get("aws.amazon.com/neuron", spec.accelerators if spec else 0)))
        nodes.append(
            Node(
                name=item["metadata"]["name"],
                instance_type=itype,
                health=labels.get(HEALTH_LABEL, "Unknown"),
                layers=tuple(labels.get(label) for label in LAYER_LABELS),
                gpus=gpus,
            )
        )
    return sorted(nodes, key=lambda n: (n.layers[0] or "~", n.layers[1] or "~", n.layers[2] or "~", n.name))


def load(path: Path) -> list[Node]:
    return parse_nodes(json.loads(path.read_text()))


def _id(kind: str, value: str) -> str:
    """A Mermaid-safe, readable node id: letters, digits and underscores only."""
    return f"{kind}_{re.sub(r'[^A-Za-z0-9]', '_', value)}"


def _label(*parts: str) -> str:
    """A quoted Mermaid label, one line per part; quotes and angle brackets escaped."""
    esc = [p.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") for p in parts]
    return '"' + "<br/>".join(esc) + '"'


def mermaid(nodes: list[Node], cluster: str = "HyperPod cluster") -> str:
    lines = ["flowchart TD", f"  cluster[{_label(cluster)}]"]
    edges: list[str] = []
    declared: set[str] = set()

    def declare(node_id: str, *label: str) -> None:
        if node_id not in declared:
            declared.add(node_id)
            lines.append(f"  {node_id}[{_label(*label)}]")

    for n in nodes:
        parent = "cluster"
        if n.placed:
            for depth, value in enumerate(n.layers, 1):
                path_id = _id(f"l{depth}", "__".join(n.layers[:depth]))
                if path_id not in declared:
                    declare(path_id, f"layer-{depth}: {value}")
                    edges.append(f"  {parent} --> {path_id}")
                parent = path_id
        else:
            if "untopo" not in declared:
                declare("untopo", NO_TOPOLOGY)
                edges.append("  cluster --> untopo")
            parent = "untopo"
        node_id = _id("node", n.name)
        declare(node_id, n.name, n.instance_type, n.health)
        edges.append(f"  {parent} --> {node_id}")
    return "\n".join(lines + edges) + "\n"


def summary(nodes: list[Node]) -> list[dict]:
    """One row per layer-3 network node: nodes and GPUs under it, and how many schedulable."""
    rows: dict[tuple, dict] = {}
    for n in nodes:
        key = n.layers if n.placed else (None, None, None)
        row = rows.setdefault(key, {"layers": key, "nodes": 0, "schedulable": 0, "gpus": 0, "types": set(), "unhealthy": []})
        row["nodes"] += 1
        row["gpus"] += n.gpus
        row["schedulable"] += n.health == "Schedulable"
        row["types"].add(n.instance_type)
        if n.health != "Schedulable":
            row["unhealthy"].append(n)
    return sorted(rows.values(), key=lambda r: (r["layers"][2] is None, -r["schedulable"], str(r["layers"])))


def largest_required_job(rows: list[dict]) -> int:
    """Nodes of the largest job a required layer-3 topology can place: the most schedulable
    nodes under any one layer-3 network node."""
    return max((r["schedulable"] for r in rows if r["layers"][2]), default=0)


def summary_text(nodes: list[Node]) -> str:
    rows = summary(nodes)
    if not rows:
        return "no nodes\n"
    out = [f"{'layer-3 network node':<28} {'layer-2':<22} {'nodes':>5} {'schedulable':>11} {'GPUs':>5}  types"]
    for r in rows:
        l1, l2, l3 = r["layers"]
        out.append(
            f"{(l3 or '(no topology labels)'):<28} {(l2 or '-'):<22} {r['nodes']:>5} {r['schedulable']:>11} {r['gpus']:>5}  "
            + ", ".join(sorted(r["types"]))
        )
    out.append(f"largest job with required topology at layer 3: {largest_required_job(rows)} node(s)")
    return "\n".join(out) + "\n"


def markdown(nodes: list[Node], title: str = "HyperPod topology") -> str:
    """The summary as a Markdown table, for a pull request or an issue."""
    rows = summary(nodes)
    out = [f"### {title}", "", f"{len(nodes)} nodes; largest job with required topology at layer 3: "
           f"**{largest_required_job(rows)} node(s)**", "",
           "| layer-3 network node | layer-2 | schedulable / nodes | GPUs | types | not schedulable |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        _, l2, l3 = r["layers"]
        bad = ", ".join(f"{n.name} ({n.health})" for n in r["unhealthy"]) or "-"
        out.append(f"| {l3 or '(no topology labels)'} | {l2 or '-'} | {r['schedulable']} / {r['nodes']} | {r['gpus']} | "
                   f"{', '.join(sorted(r['types']))} | {bad} |")
    return "\n".join(out) + "\n"


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #1a1a1a; }
table { border-collapse: collapse; margin-bottom: 16px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; font-size: 14px; }
.layer2 { margin: 12px 0; }
.layer2 > h2 { font-size: 16px; margin: 4px 0; }
.groups { display: flex; flex-wrap: wrap; gap: 8px; }
.group { width: 210px; border: 2px solid #2e7d32; background: #e8f5e9; border-radius: 6px; padding: 6px 8px; }
.group.degraded { border-color: #c62828; background: #ffebee; }
.group.unplaced { border-color: #757575; background: #f5f5f5; }
.group .label { font-size: 14px; font-weight: 600; word-break: break-all; }
.group .counts { font-size: 14px; }
.group ul { margin: 4px 0 0 16px; padding: 0; font-size: 13px; color: #b71c1c; }
"""


def html_page(nodes: list[Node], title: str = "HyperPod topology") -> str:
    """A self-contained page that stays readable at hundreds of nodes: the summary table,
    then one box per layer-3 network node under its layer-2 heading (schedulable/total,
    GPUs; red when any node is not schedulable, which are listed by name)."""
    e = html.escape
    rows = summary(nodes)
    table = ["<table><tr><th>layer-3 network node</th><th>layer-2</th><th>schedulable / nodes</th><th>GPUs</th><th>types</th></tr>"]
    for r in rows:
        _, l2, l3 = r["layers"]
        table.append(f"<tr><td>{e(l3 or '(no topology labels)')}</td><td>{e(l2 or '-')}</td>"
                     f"<td>{r['schedulable']} / {r['nodes']}</td><td>{r['gpus']}</td><td>{e(', '.join(sorted(r['types'])))}</td></tr>")
    table.append("</table>")
    sections: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: tuple(x or "~" for x in r["layers"])):
        l1, l2, l3 = r["layers"]
        heading = f"layer-1 {l1} / layer-2 {l2}" if l3 else NO_TOPOLOGY
        state = "unplaced" if not l3 else ("degraded" if r["unhealthy"] else "healthy")
        bad = "".join(f"<li>{e(n.name)}: {e(n.health)}</li>" for n in r["unhealthy"])
        sections.setdefault(heading, []).append(
            f'<div class="group {state}" data-health="{state}"><div class="label">{e(l3 or "no labels")}</div>'
            f'<div class="counts">{r["schedulable"]}/{r["nodes"]} schedulable, {r["gpus"]} GPUs</div>'
            + (f"<ul>{bad}</ul>" if bad else "") + "</div>"
        )
    body = "".join(f'<section class="layer2"><h2>{e(h)}</h2><div class="groups">{"".join(g)}</div></section>' for h, g in sections.items())
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{e(title)}</title><style>{_STYLE}</style></head>\n<body>\n'
        f"<h1>{e(title)}</h1>\n<p>{len(nodes)} nodes. Largest job with required topology at layer 3: "
        f"<strong>{largest_required_job(rows)} node(s)</strong></p>\n{''.join(table)}\n{body}\n</body></html>\n"
    )
