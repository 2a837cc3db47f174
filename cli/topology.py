"""The cluster's EC2 network topology, from a node list: a page grouped by layer-3 network
node, a Markdown summary for pull requests, a plain summary, or a Mermaid diagram.

Input is what `kubectl get nodes -o json` prints, and what `kubectl get pods -A -o json`
prints for the GPUs in use. EC2 labels each node with the network nodes above it
(`topology.k8s.aws/network-node-layer-1..3`, layer 1 the farthest); HyperPod adds the
instance type and its health status. A node can run work when HyperPod's health label says
Schedulable, its Ready condition is True, it is not cordoned and no NoSchedule or NoExecute
taint keeps pods off it. A required-topology job of N nodes fits only under one layer-3
network node with at least N such nodes. Its free GPUs are the allocatable ones less what
the pods bound to it and not finished request.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from infra import catalogue

LAYER_LABELS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3))
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
TYPE_LABEL = "node.kubernetes.io/instance-type"
NO_TOPOLOGY = "Nodes without complete topology labels"
# The accelerators a node advertises and pods request (the HyperPod CLI reads the same two
# device resources; aws.amazon.com/neuron is the Neuron device plugin's older name).
ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neurondevice", "aws.amazon.com/neuron")
# Taints that keep new pods off (NoSchedule) or evict them (NoExecute); PreferNoSchedule only prefers.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# Taints Kubernetes and HyperPod add for a state the node's other fields already say.
_SAID_BY = {"node.kubernetes.io/unschedulable": "cordoned", "node.kubernetes.io/not-ready": "NotReady", HEALTH_LABEL: "health"}
# Past this many nodes, the Mermaid diagram draws one box per layer-3 network node: one box per
# node draws a strip thousands of pixels wide, and Mermaid refuses text over its default
# maxTextSize (MAX_MERMAID_TEXT) at a few hundred nodes.
FULL_TREE_MAX_NODES = 32
# Mermaid's defaults (its config schema, packages/mermaid/src/schemas/config.schema.yaml): a
# diagram over either is not drawn ("Maximum text size in diagram exceeded").
MAX_MERMAID_TEXT = 50_000  # maxTextSize
MAX_MERMAID_EDGES = 500  # maxEdges
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Node:
    name: str
    instance_type: str
    health: str
    layers: tuple[str | None, str | None, str | None]
    gpus: int  # allocatable accelerators
    ready: bool = True
    cordoned: bool = False
    taints: tuple[str, ...] = ()  # key:effect of each NoSchedule/NoExecute taint
    gpus_requested: int | None = None  # None: no pod list was read
    why_not: tuple[str, ...] = field(default=())

    @property
    def placed(self) -> bool:
        return all(self.layers)

    @property
    def schedulable(self) -> bool:
        return not self.why_not

    @property
    def free_gpus(self) -> int | None:
        """Accelerators a new pod could get here: none on a node that cannot run work."""
        if self.gpus_requested is None:
            return None
        return max(self.gpus - self.gpus_requested, 0) if self.schedulable else 0

    @property
    def state(self) -> str:
        return "Schedulable" if self.schedulable else ", ".join(self.why_not)


def _reasons(health: str, ready: str, cordoned: bool, taints: list[dict], tolerated: frozenset[str]) -> tuple[str, ...]:
    why = []
    if health != "Schedulable":
        why.append(f"health {health}")
    if ready != "True":
        why.append({"False": "NotReady", "missing": "no Ready condition"}.get(ready, f"NotReady ({ready})"))
    if cordoned:
        why.append("cordoned")
    effects: dict[str, list[str]] = {}
    for t in taints:
        key = t.get("key", "")
        if t.get("effect") not in BLOCKING_EFFECTS or key in tolerated or any(w.startswith(_SAID_BY.get(key, "\0")) for w in why):
            continue
        effects.setdefault(f"{key}{'=' + t['value'] if t.get('value') else ''}", []).append(t["effect"])
    why += [f"taint {taint}:{'/'.join(sorted(set(effect)))}" for taint, effect in effects.items()]
    return tuple(why)


def _quantity(value) -> int:
    """An extended resource's quantity: whole devices ("8", 8)."""
    return int(str(value))


def requested_gpus(pods_doc: dict) -> dict[str, int]:
    """Accelerators requested per node by the pods bound to it that have not finished. A pod's
    request is its containers' sum or its largest init container's, whichever is more (as the
    scheduler counts it); an extended resource's request defaults to its limit."""
    used: Counter = Counter()
    for pod in pods_doc.get("items", []):
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or status.get("phase") in TERMINAL_PHASES:
            continue

        def asks(container: dict) -> int:
            res = container.get("resources") or {}
            wants = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            return sum(_quantity(wants[r]) for r in ACCELERATOR_RESOURCES if r in wants)

        main = sum(asks(c) for c in spec.get("containers") or [])
        init = max((asks(c) for c in spec.get("initContainers") or []), default=0)
        used[node] += max(main, init)
    return dict(used)


def parse_nodes(doc: dict, pods: dict | None = None, tolerated: tuple[str, ...] = ()) -> list[Node]:
    """The nodes of a `kubectl get nodes -o json` document; with `pods` (a `kubectl get pods -A
    -o json` document) what their pods request. `tolerated`: taint keys the work to place
    tolerates (a group's dedicated taint), which do not count against a node."""
    used = requested_gpus(pods) if pods is not None else None
    nodes = []
    for item in doc.get("items", []):
        labels = item.get("metadata", {}).get("labels", {}) or {}
        itype = labels.get(TYPE_LABEL, labels.get("beta.kubernetes.io/instance-type", "unknown"))
        status, spec = item.get("status", {}) or {}, item.get("spec", {}) or {}
        advertised = status.get("allocatable") or status.get("capacity") or {}
        devices = [r for r in ACCELERATOR_RESOURCES if r in advertised]
        known = catalogue.figures(itype)
        gpus = _quantity(advertised[devices[0]]) if devices else (known.accelerators if known else 0)
        ready = next((c.get("status", "Unknown") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "missing")
        health = labels.get(HEALTH_LABEL, "Unknown")
        taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
        name = item["metadata"]["name"]
        nodes.append(
            Node(
                name=name,
                instance_type=itype,
                health=health,
                layers=tuple(labels.get(label) for label in LAYER_LABELS),
                gpus=gpus,
                ready=ready == "True",
                cordoned=bool(spec.get("unschedulable")),
                taints=tuple(f"{t.get('key')}:{t.get('effect')}" for t in taints if t.get("effect") in BLOCKING_EFFECTS),
                gpus_requested=None if used is None else used.get(name, 0),
                why_not=_reasons(health, ready, bool(spec.get("unschedulable")), taints, frozenset(tolerated)),
            )
        )
    return sorted(nodes, key=lambda n: (n.layers[0] or "~", n.layers[1] or "~", n.layers[2] or "~", n.name))


def load(path: Path, pods: Path | None = None) -> list[Node]:
    return parse_nodes(json.loads(path.read_text()), json.loads(pods.read_text()) if pods else None)


def unhealthy(nodes: list[Node]) -> list[Node]:
    return [n for n in nodes if not n.schedulable]


def _id(kind: str, value: str) -> str:
    """A Mermaid-safe, readable node id: letters, digits and underscores only."""
    return f"{kind}_{re.sub(r'[^A-Za-z0-9]', '_', value)}"


def _label(*parts: str) -> str:
    """A quoted Mermaid label, one line per part; quotes and angle brackets escaped."""
    esc = [p.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") for p in parts]
    return '"' + "<br/>".join(esc) + '"'


def _gpu_words(row: dict) -> str:
    free = "" if row["free_gpus"] is None else f", {row['free_gpus']} free"
    return f"{row['gpus']} GPUs{free}"


def mermaid(nodes: list[Node], cluster: str = "HyperPod cluster", full: bool | None = None) -> str:
    """A flowchart: cluster, layer-1, -2, -3, then either every node (`full`, the default up
    to FULL_TREE_MAX_NODES nodes; top down) or one box per layer-3 network node with its
    counts (left to right), the boxes holding a node that cannot run work marked."""
    full = len(nodes) <= FULL_TREE_MAX_NODES if full is None else full
    # Left to right when aggregated: the layer-3 boxes stack in a column instead of a strip.
    lines = ["flowchart TD" if full else "flowchart LR", f"  cluster[{_label(cluster)}]"]
    edges: list[str] = []
    declared: set[str] = set()
    degraded: list[str] = []

    def declare(node_id: str, *label: str) -> None:
        if node_id not in declared:
            declared.add(node_id)
            lines.append(f"  {node_id}[{_label(*label)}]")

    def parent_of(layers: tuple) -> str:
        parent = "cluster"
        if not all(layers):
            if "untopo" not in declared:
                declare("untopo", NO_TOPOLOGY)
                edges.append("  cluster --> untopo")
            return "untopo"
        for depth, value in enumerate(layers[: 3 if full else 2], 1):
            path_id = _id(f"l{depth}", "__".join(layers[:depth]))
            if path_id not in declared:
                declare(path_id, f"layer-{depth}: {value}")
                edges.append(f"  {parent} --> {path_id}")
            parent = path_id
        return parent

    if full:
        for n in nodes:
            parent = parent_of(n.layers)
            node_id = _id("node", n.name)
            declare(node_id, n.name, n.instance_type, n.state)
            edges.append(f"  {parent} --> {node_id}")
            if not n.schedulable:
                degraded.append(node_id)
    else:
        for row in sorted(summary(nodes), key=lambda r: tuple(x or "~" for x in r["layers"])):
            l3 = row["layers"][2]
            box = _id("l3", "__".join(row["layers"])) if l3 else "untopo"
            edges.append(f"  {parent_of(row['layers']) if l3 else 'cluster'} --> {box}")
            declare(box, f"layer-3: {l3}" if l3 else NO_TOPOLOGY, f"{row['schedulable']}/{row['nodes']} schedulable", _gpu_words(row))
            if row["unhealthy"]:
                degraded.append(box)
    out = lines + edges
    if degraded:
        out += ["  classDef degraded fill:#ffebee,stroke:#c62828", f"  class {','.join(degraded)} degraded"]
    return "\n".join(out) + "\n"


def mermaid_too_big(diagram: str) -> str | None:
    """Why Mermaid with its default config would not draw `diagram`, or None."""
    edges = diagram.count(" --> ")
    if len(diagram) > MAX_MERMAID_TEXT or edges > MAX_MERMAID_EDGES:
        return (f"the diagram has {len(diagram)} characters and {edges} edges; Mermaid draws at most {MAX_MERMAID_TEXT} "
                f"and {MAX_MERMAID_EDGES} by default (maxTextSize, maxEdges): leave out --full, or use --format html")
    return None


def summary(nodes: list[Node]) -> list[dict]:
    """One row per layer-3 network node: nodes under it, how many can run work, and the GPUs
    of those (allocatable, and free where the pods are known)."""
    rows: dict[tuple, dict] = {}
    known = all(n.gpus_requested is not None for n in nodes)
    for n in nodes:
        key = n.layers if n.placed else (None, None, None)
        row = rows.setdefault(key, {"layers": key, "nodes": 0, "schedulable": 0, "gpus": 0, "free_gpus": 0 if known else None,
                                    "types": set(), "unhealthy": []})
        row["nodes"] += 1
        row["types"].add(n.instance_type)
        if n.schedulable:
            row["schedulable"] += 1
            row["gpus"] += n.gpus
            if known:
                row["free_gpus"] += n.free_gpus
        else:
            row["unhealthy"].append(n)
    return sorted(rows.values(), key=lambda r: (r["layers"][2] is None, -r["schedulable"], str(r["layers"])))


def largest_required_job(rows: list[dict]) -> int:
    """Nodes of the largest job a required layer-3 topology can place: the most schedulable
    nodes under any one layer-3 network node."""
    return max((r["schedulable"] for r in rows if r["layers"][2]), default=0)


def totals(nodes: list[Node]) -> str:
    """One sentence: nodes, how many can run work, the unhealthy total, the GPUs."""
    rows = summary(nodes)
    bad = unhealthy(nodes)
    gpus = sum(r["gpus"] for r in rows)
    free = None if any(r["free_gpus"] is None for r in rows) else sum(r["free_gpus"] for r in rows)
    unknown = sum("no Ready condition" in n.why_not for n in nodes)
    # A dump without status.conditions (hand-written, or trimmed) says nothing of readiness.
    why = (f" ({unknown} of them with no Ready condition in the node list: without status.conditions a node is not "
           "known to be Ready, so it counts as not schedulable)") if unknown else ""
    return (f"{len(nodes)} nodes: {len(nodes) - len(bad)} schedulable, {len(bad)} not schedulable{why}; "
            f"{gpus} GPUs on schedulable nodes, " + (f"{free} free" if free is not None else "free unknown (no pod list)"))


def summary_text(nodes: list[Node]) -> str:
    rows = summary(nodes)
    if not rows:
        return "no nodes\n"
    out = [f"{'layer-3 network node':<28} {'layer-2':<22} {'nodes':>5} {'schedulable':>11} {'GPUs':>5} {'free':>5}  types"]
    for r in rows:
        l1, l2, l3 = r["layers"]
        free = "?" if r["free_gpus"] is None else r["free_gpus"]
        out.append(
            f"{(l3 or '(no topology labels)'):<28} {(l2 or '-'):<22} {r['nodes']:>5} {r['schedulable']:>11} {r['gpus']:>5} {free:>5}  "
            + ", ".join(sorted(r["types"]))
        )
    out.append(totals(nodes))
    out.append(f"largest job with required topology at layer 3: {largest_required_job(rows)} node(s)")
    return "\n".join(out) + "\n"


def markdown(nodes: list[Node], title: str = "HyperPod topology") -> str:
    """The summary as a Markdown table, for a pull request or an issue."""
    rows = summary(nodes)
    out = [f"### {title}", "", f"{totals(nodes)}; largest job with required topology at layer 3: "
           f"**{largest_required_job(rows)} node(s)**", "",
           "| layer-3 network node | layer-2 | schedulable / nodes | GPUs (free) | types | not schedulable |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        _, l2, l3 = r["layers"]
        bad = ", ".join(f"{n.name} ({n.state})" for n in r["unhealthy"]) or "-"
        free = "" if r["free_gpus"] is None else f" ({r['free_gpus']})"
        out.append(f"| {l3 or '(no topology labels)'} | {l2 or '-'} | {r['schedulable']} / {r['nodes']} | {r['gpus']}{free} | "
                   f"{', '.join(sorted(r['types']))} | {bad} |")
    return "\n".join(out) + "\n"


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #1a1a1a; }
table { border-collapse: collapse; margin-bottom: 16px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; font-size: 14px; }
.layer2 { margin: 12px 0; }
.layer2 > h2 { font-size: 16px; margin: 4px 0; }
.groups { display: flex; flex-wrap: wrap; gap: 8px; }
.group { width: 210px; box-sizing: border-box; border: 2px solid #2e7d32; background: #e8f5e9; border-radius: 6px; padding: 6px 8px; }
.group.degraded { border-color: #c62828; background: #ffebee; }
.group.unplaced { border-color: #757575; background: #f5f5f5; }
.group .label { font-size: 14px; font-weight: 600; overflow-wrap: anywhere; }
.group .counts { font-size: 14px; }
.group ul { margin: 4px 0 0 16px; padding: 0; font-size: 13px; color: #b71c1c; }
.group li { overflow-wrap: anywhere; }
"""


def html_page(nodes: list[Node], title: str = "HyperPod topology") -> str:
    """A self-contained page that stays readable at hundreds of nodes: the totals (the
    unhealthy total among them), the summary table, one list of the nodes that cannot run
    work and why, then one box per layer-3 network node under its layer-2 heading
    (schedulable/total, GPUs; red when any node is not schedulable, which are named)."""
    e = html.escape
    rows = summary(nodes)
    table = ["<table><tr><th>layer-3 network node</th><th>layer-2</th><th>schedulable / nodes</th><th>GPUs</th><th>free GPUs</th>"
             "<th>types</th></tr>"]
    for r in rows:
        _, l2, l3 = r["layers"]
        free = "?" if r["free_gpus"] is None else r["free_gpus"]
        table.append(f"<tr><td>{e(l3 or '(no topology labels)')}</td><td>{e(l2 or '-')}</td>"
                     f"<td>{r['schedulable']} / {r['nodes']}</td><td>{r['gpus']}</td><td>{free}</td>"
                     f"<td>{e(', '.join(sorted(r['types'])))}</td></tr>")
    table.append("</table>")
    bad = unhealthy(nodes)
    listing = ""
    if bad:
        listing = (f'<h2 id="unhealthy">Not schedulable: {len(bad)}</h2>\n<table class="unhealthy"><tr><th>node</th>'
                   "<th>layer-3 network node</th><th>type</th><th>why</th></tr>"
                   + "".join(f"<tr><td>{e(n.name)}</td><td>{e(n.layers[2] or '(no topology labels)')}</td>"
                             f"<td>{e(n.instance_type)}</td><td>{e(n.state)}</td></tr>" for n in bad)
                   + "</table>\n")
    sections: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: tuple(x or "~" for x in r["layers"])):
        l1, l2, l3 = r["layers"]
        heading = f"layer-1 {l1} / layer-2 {l2}" if l3 else NO_TOPOLOGY
        state = "unplaced" if not l3 else ("degraded" if r["unhealthy"] else "healthy")
        names = "".join(f"<li>{e(n.name)}: {e(n.state)}</li>" for n in r["unhealthy"])
        sections.setdefault(heading, []).append(
            f'<div class="group {state}" data-health="{state}"><div class="label">{e(l3 or "no labels")}</div>'
            f'<div class="counts">{r["schedulable"]}/{r["nodes"]} schedulable, {e(_gpu_words(r))}</div>'
            + (f"<ul>{names}</ul>" if names else "") + "</div>"
        )
    body = "".join(f'<section class="layer2"><h2>{e(h)}</h2><div class="groups">{"".join(g)}</div></section>' for h, g in sections.items())
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{e(title)}</title><style>{_STYLE}</style></head>\n<body>\n'
        f'<h1>{e(title)}</h1>\n<p class="totals">{e(totals(nodes))}. Largest job with required topology at layer 3: '
        f"<strong>{largest_required_job(rows)} node(s)</strong></p>\n{''.join(table)}\n{listing}{body}\n</body></html>\n"
    )


# -- the command ---------------------------------------------------------------------------------


class InputError(Exception):
    """A dump or kubectl that gives no node or pod list: one line, exit status 2 (as cli.main's CliError)."""


def _live(*what: str) -> dict:
    """`kubectl get <what> -o json` of the current context."""
    if shutil.which("kubectl") is None:
        raise InputError("kubectl is not on PATH; install it or pass --from FILE (a `kubectl get nodes -o json` dump)")
    result = subprocess.run(["kubectl", "get", *what, "-o", "json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise InputError(f"kubectl get {' '.join(what)} failed: {result.stderr.strip()[-300:]}")
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError as err:
        raise InputError(f"kubectl get {' '.join(what)}: not JSON: {err}") from None


def _dump(flag: str, path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{flag} {path}: {err}") from None


def command(args) -> int:
    """`hyperpod-cdk topology`: from dumps, or the live cluster through kubectl."""
    # The pods say which GPUs are in use: from a dump beside the nodes', or the live cluster's.
    doc = _dump("--from", args.from_file) if args.from_file else _live("nodes")
    pods = _dump("--pods", args.pods) if args.pods else (None if args.from_file else _live("pods", "-A"))
    try:
        requested_gpus(pods or {})
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        source = f"--pods {args.pods}" if args.pods else "kubectl get pods -A"
        raise InputError(f"{source}: not a pod list (`kubectl get pods -A -o json`): {type(err).__name__} {err}") from None
    try:
        nodes = parse_nodes(doc, pods, tuple(args.tolerate or ()))
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        source = f"--from {args.from_file}" if args.from_file else "kubectl get nodes"
        raise InputError(f"{source}: not a node list (`kubectl get nodes -o json`): {type(err).__name__} {err}") from None
    if args.summary:
        text = summary_text(nodes)
    elif args.format == "html":
        text = html_page(nodes, title=f"{args.cluster_name}: EC2 network topology")
    elif args.format == "markdown":
        text = markdown(nodes, title=f"{args.cluster_name}: EC2 network topology")
    else:
        text = mermaid(nodes, cluster=args.cluster_name, full=True if args.full else None)
        if mermaid_too_big(text):
            print(f"warning: {mermaid_too_big(text)}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
