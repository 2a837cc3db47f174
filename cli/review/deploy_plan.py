"""An estimated deploy plan: the critical path through the stack and resource graph.

Each resource takes its type's typical creation minutes (the table below: typical values
from the AWS documentation and from deploying these resource types; an estimate, not a
promise) and starts when everything it depends on is done: its DependsOn, the resources
it references, and, across stacks, the whole of every stack its stack depends on (CDK
deploys a stack only after its dependencies finished).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from cli.review.assembly import group_instance_type
from cli.review import replacement
from infra import catalogue, timing

# Typical creation minutes per resource type. Anything not listed: DEFAULT_MINUTES.
TYPICAL_MINUTES = {
    "AWS::EKS::Cluster": 12.0,
    "AWS::EKS::Addon": 3.0,
    "Custom::AWSCDK-EKS-HelmChart": 4.0,
    "Custom::AWSCDK-EKS-KubernetesResource": 1.0,
    # A readiness gate: the add-on's create already waited for its pods; this covers the
    # webhook's certificate and endpoints (a namespace gate: task governance's reconcile).
    "Custom::AWSCDK-EKS-KubernetesObjectValue": 0.5,
    "Custom::HyperPodNodesReady": 0.5,
    # The device plugins start on Running nodes and register their devices with the kubelet.
    "Custom::HyperPodAcceleratorsReady": 3.0,
    "AWS::EC2::NatGateway": 2.0,
    "AWS::EC2::VPCEndpoint": 2.0,
    "AWS::EC2::InternetGateway": 0.5,
    "AWS::EC2::VPC": 0.5,
    "AWS::Lambda::Function": 0.5,
    "AWS::Lambda::LayerVersion": 0.5,
    "Custom::CDKBucketDeployment": 1.0,
    "AWS::APS::Workspace": 2.0,
    "AWS::Grafana::Workspace": 5.0,
    "AWS::SageMaker::ClusterSchedulerConfig": 2.0,
    "AWS::SageMaker::ComputeQuota": 1.0,
    "AWS::KMS::Key": 0.5,
    "AWS::S3::Bucket": 0.3,
    "AWS::IAM::Role": 0.3,
    "AWS::IAM::ManagedPolicy": 0.2,
    "AWS::EKS::PodIdentityAssociation": 0.3,
    "AWS::EKS::AccessEntry": 0.2,
    "AWS::Logs::LogGroup": 0.1,
}
DEFAULT_MINUTES = 0.1
# Cluster-level resources only, before any node (NodeProvisioningMode Continuous).
CONTINUOUS_CLUSTER_MINUTES = 3.0


@dataclass
class Step:
    stack: str
    logical_id: str
    type: str
    start: float
    minutes: float

    @property
    def end(self) -> float:
        return self.start + self.minutes


def _references(resource: dict) -> set[str]:
    text = json.dumps(resource.get("Properties", {}))
    refs = set(re.findall(r'"Ref": "([A-Za-z0-9]+)"', text))
    refs |= set(re.findall(r'"Fn::GetAtt": \["([A-Za-z0-9]+)"', text))
    depends = resource.get("DependsOn", [])
    return refs | set(depends if isinstance(depends, list) else [depends])


def _continuous(resources: dict) -> bool:
    return any(
        r["Type"] == "AWS::SageMaker::Cluster" and r.get("Properties", {}).get("NodeProvisioningMode") == "Continuous"
        for r in resources.values()
    )


def group_minutes(group: dict) -> float:
    """Minutes until one instance group's nodes are all Running, by type, count and checks."""
    kind = catalogue.figures(group_instance_type(group))
    count = group.get("InstanceCount", 1)
    return timing.node_minutes(
        accelerated=bool(kind and kind.is_accelerated),
        efa_interfaces=kind.efa_interfaces if kind else 0,
        count=count if isinstance(count, int) else 1,
        checks=group.get("OnStartDeepHealthChecks", []),
    )


def node_minutes(resources: dict) -> float:
    """The slowest instance group of the stack's HyperPod clusters (groups start in parallel)."""
    return max(
        (
            group_minutes(group)
            for r in resources.values()
            if r["Type"] == "AWS::SageMaker::Cluster"
            for group in r.get("Properties", {}).get("InstanceGroups", [])
        ),
        default=0.0,
    )


def _minutes(resource: dict, continuous: bool, nodes: float) -> float:
    """Typical minutes of one resource. With continuous provisioning the HyperPod cluster
    reports done before its nodes exist, and the node gate's first link carries their boot
    time (the links after it end when the nodes are ready, which they then are)."""
    res_type = resource["Type"]
    if res_type == "AWS::SageMaker::Cluster":
        return CONTINUOUS_CLUSTER_MINUTES if continuous else CONTINUOUS_CLUSTER_MINUTES + nodes
    if res_type == "Custom::HyperPodNodesReady" and not _first_link(resource):
        return DEFAULT_MINUTES  # its first check finds the nodes the first link waited for
    if continuous and res_type == "Custom::HyperPodNodesReady":
        return nodes
    return TYPICAL_MINUTES.get(res_type, DEFAULT_MINUTES)


def _first_link(resource: dict) -> bool:
    return str(resource.get("Properties", {}).get("Link", "1/1")).startswith("1/")


def plan(stacks) -> tuple[float, list[Step]]:
    """stacks: cli.review.assembly.StackSummary in deploy order. (total minutes, critical path)."""
    done = _schedule(stacks)
    longest = max(done.values(), key=_end, default=[])
    return _end(longest), longest


def stack_spans(stacks) -> list[tuple[str, float, float]]:
    """(stack, start, end) minutes of each stack in deploy order: where a stack sits in the
    deploy, also one off the critical path (the operations stack beside the sample job)."""
    done = _schedule(stacks)
    spans = []
    for stack in stacks:
        start = max((_end(done[d]) for d in stack.depends_on if d in done), default=0.0)
        spans.append((stack.name, start, max(start, _end(done[stack.name]))))
    return spans


def _end(path: list[Step]) -> float:
    return path[-1].end if path else 0.0


def _schedule(stacks, minutes=None) -> dict[str, list[Step]]:
    """Each stack's critical path up to its last resource. `minutes(stack, logical id)` gives
    a resource's time (default: its creation, as for a first deploy)."""
    done: dict[str, list[Step]] = {}  # stack -> the critical path up to its last resource

    for stack in stacks:
        # A stack starts once the latest of the stacks it depends on has finished.
        base = max((done[d] for d in stack.depends_on if d in done), key=_end, default=[])
        resources = stack.resources
        continuous = _continuous(resources)
        nodes = node_minutes(resources)
        paths: dict[str, list[Step]] = {}

        def visit(lid: str, trail=()) -> list[Step]:
            if lid not in paths:
                refs = [r for r in sorted(_references(resources[lid])) if r in resources and r not in trail]
                before = [visit(ref, trail + (lid,)) for ref in refs]
                path = max(before, key=_end, default=base)  # each starts from `base`
                res_type = resources[lid]["Type"]
                took = minutes(stack, lid) if minutes else _minutes(resources[lid], continuous, nodes)
                paths[lid] = path + [Step(stack.name, lid, res_type, _end(path), took)]
            return paths[lid]

        done[stack.name] = max((visit(lid) for lid in resources), key=_end, default=base)
    return done


# -- this update --------------------------------------------------------------------------------


@dataclass
class Update:
    """What one update of a HyperPod cluster asks of its nodes."""

    minutes: float  # until the slowest group's new nodes run, deep health checks included
    waits: list[str]


def _checks(group: dict) -> str:
    checks = group.get("OnStartDeepHealthChecks") or []
    return f" with deep health checks {', '.join(checks)}" if checks else ""


def cluster_update(old: dict, new: dict) -> Update:
    """The nodes an update of AWS::SageMaker::Cluster starts, as the table of what each
    instance-group property does to running nodes says (cli/review/replacement.py): a new group's, every
    node of a group a change replaces or rolls, the nodes a count adds. A change that reaches
    running nodes in place (labels, taints) or only the nodes made later (the lifecycle script)
    starts none and takes no node time."""
    before = {g["InstanceGroupName"]: g for g in old.get("Properties", {}).get("InstanceGroups", [])}
    slowest, waits = 0.0, []
    for group in new.get("Properties", {}).get("InstanceGroups", []):
        name, itype = group["InstanceGroupName"], group_instance_type(group)
        prev = before.get(name)
        count = group.get("InstanceCount", 0)
        count = count if isinstance(count, int) else 1
        effects = replacement.group_effects(prev, group) if prev is not None else {}
        if prev is None:
            took, what = group_minutes(group), f"nodes added: {count} x {itype} in the new group {name}{_checks(group)}"
        elif replacement.REPLACE in effects:
            took, what = group_minutes(group), f"nodes replaced: every node of group {name} ({count} x {itype}){_checks(group)}"
        elif replacement.ROLL in effects:
            took, what = group_minutes(group), f"nodes roll: every node of group {name} ({count} x {itype}){_checks(group)}"
        elif isinstance(prev.get("InstanceCount"), int) and count > prev["InstanceCount"]:
            added = count - prev["InstanceCount"]
            took, what = group_minutes({**group, "InstanceCount": added}), f"nodes added: {added} x {itype} in group {name}{_checks(group)}"
        else:
            if replacement.IN_PLACE in effects:
                waits.append(f"group {name}: {', '.join(effects[replacement.IN_PLACE])} reconciled on the running nodes, no restart")
            continue
        if took:
            waits.append(f"{what} (~{took:.0f} min)")
        slowest = max(slowest, took)
    return Update(slowest, waits)


def update_plan(before, after, changes: list[dict], refused: bool = False) -> dict:
    """This update's estimate, from the template diff: only what changes takes time. An added or
    replaced resource takes its create figure; a modified HyperPod cluster the nodes it starts
    (cluster_update); a modified gate its wait again (CloudFormation sends it an Update, and a
    gate waits on Update as on Create); any other modified resource its type's figure; an
    unchanged one none (cdk deploy skips an unchanged stack). A refused update (a REFUSED callout:
    CloudFormation or the service rejects it and rolls back) has no time and starts no node."""
    if refused:
        return {"minutes": None, "waits": [], "critical_path": [], "refused": True}
    action = {(c["stack"], c["resource"]): c["action"] for c in changes if c["action"] != "removed"}
    old = {s.name: s.resources for s in before}
    updates = {
        s.name: cluster_update(old[s.name][lid], res)
        for s in after
        for lid, res in s.resources.items()
        if res["Type"] == "AWS::SageMaker::Cluster" and action.get((s.name, lid)) == "modified"
    }
    waits: list[str] = [w for u in updates.values() for w in u.waits]
    gates: dict[str, int] = {}

    def minutes(stack, lid: str) -> float:
        res = stack.resources[lid]
        act = action.get((stack.name, lid))
        continuous = _continuous(stack.resources)
        if act is None:
            return 0.0
        if act in ("added", "replaced"):
            return _minutes(res, continuous, node_minutes(stack.resources))
        nodes = updates[stack.name].minutes if stack.name in updates else 0.0
        if res["Type"] == "AWS::SageMaker::Cluster":
            return CONTINUOUS_CLUSTER_MINUTES + (0.0 if continuous else nodes)
        if res["Type"] in GATE_TYPES:
            gates[res["Type"]] = gates.get(res["Type"], 0) + 1
            if res["Type"] == "Custom::HyperPodNodesReady":
                return nodes if continuous and _first_link(res) else DEFAULT_MINUTES
            if not nodes:  # no node starts: the gate finds what it found before at its first poll
                return DEFAULT_MINUTES
        return TYPICAL_MINUTES.get(res["Type"], DEFAULT_MINUTES)

    done = _schedule(after, minutes)
    path = max(done.values(), key=_end, default=[])
    for gate, n in sorted(gates.items()):
        waits.append(f"{GATE_TYPES[gate]} re-runs ({n} link(s))" if n > 1 else f"{GATE_TYPES[gate]} re-runs")
    for name, update in updates.items():
        stack = next(s for s in after if s.name == name)
        if update.minutes and _continuous(stack.resources) and not gates.get("Custom::HyperPodNodesReady"):
            waits.append(f"nothing waits for the new nodes in {name}: with continuous provisioning the cluster's update "
                         "ends before they run, and no node gate changes")
    return {
        "minutes": math.ceil(_end(path) - 1e-9),  # rounded up: "about 0 minutes" is no estimate
        "under_a_minute": _end(path) < 1,
        "waits": waits,
        "critical_path": [
            {"stack": st.stack, "resource": st.logical_id, "type": st.type, "start": round(st.start, 1), "minutes": st.minutes}
            for st in path
            if st.minutes >= 1.0
        ],
    }


# The readiness gates, in words.
GATE_TYPES = {"Custom::HyperPodNodesReady": "the node gate", "Custom::HyperPodAcceleratorsReady": "the accelerator gate",
              "Custom::AWSCDK-EKS-KubernetesObjectValue": "a readiness gate"}


def in_words(update: dict) -> str:
    """This update's time as the review says it."""
    if update.get("refused"):
        return "none: it is refused (REFUSED above), so nothing deploys and no node starts"
    if update["under_a_minute"]:
        return "under a minute"
    return f"about {update['minutes']} minute{'s' if update['minutes'] != 1 else ''}"
