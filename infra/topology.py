"""The cluster's EC2 network topology, from a node list, as a Mermaid diagram or a summary.

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
        row = rows.setdefault(key, {"layers": key, "nodes": 0, "schedulable": 0, "gpus": 0, "types": set()})
        row["nodes"] += 1
        row["gpus"] += n.gpus
        row["schedulable"] += n.health == "Schedulable"
        row["types"].add(n.instance_type)
    return sorted(rows.values(), key=lambda r: (r["layers"][2] is None, -r["schedulable"], str(r["layers"])))


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
    placed = [r for r in rows if r["layers"][2]]
    fit = max((r["schedulable"] for r in placed), default=0)
    out.append(f"largest job with required topology at layer 3: {fit} node(s)")
    return "\n".join(out) + "\n"


def html_page(diagram: str, mermaid_js: str, title: str = "HyperPod topology") -> str:
    """A self-contained page: the Mermaid library inlined, no network needed to render."""
    # A literal "</script" inside the library would end the element early.
    script = mermaid_js.replace("</script", "<\\/script")
    return (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title></head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        f"<pre class=\"mermaid\">\n{html.escape(diagram)}</pre>\n"
        f"<script>{script}</script>\n"
        "<script>mermaid.initialize({startOnLoad: true, securityLevel: 'strict', maxTextSize: 1000000});</script>\n"
        "</body></html>\n"
    )
