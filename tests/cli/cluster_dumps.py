"""`kubectl get nodes -o json` and `kubectl get pods -A -o json` of a HyperPod cluster of any
size, made in the test, with the truth about them beside: which nodes can run work and how
many GPUs each has free. Nodes as the API server and HyperPod write them: the health label,
the Ready condition, `spec.unschedulable` on a cordoned node and the taints the node
lifecycle controller adds (node.kubernetes.io/not-ready, /unreachable, /unschedulable)."""

from __future__ import annotations

from dataclasses import dataclass, field

HEALTH = "sagemaker.amazonaws.com/node-health-status"
GPUS = 8  # ml.p5.48xlarge


@dataclass
class Dumps:
    nodes: dict
    pods: dict
    schedulable: set[str] = field(default_factory=set)
    free: dict[str, int] = field(default_factory=dict)  # schedulable node -> GPUs free
    kinds: dict[str, str] = field(default_factory=dict)  # node -> what is wrong with it


def _node(name: str, labels: dict, ready: str = "True", cordoned: bool = False, taints: list | None = None) -> dict:
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "ml.p5.48xlarge", **labels}},
        "spec": {"providerID": f"aws:///us-east-1a/{name}"},
        "status": {
            "capacity": {"cpu": "192", "nvidia.com/gpu": str(GPUS), "pods": "250"},
            "allocatable": {"cpu": "191450m", "nvidia.com/gpu": str(GPUS), "pods": "250"},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}],
        },
    }
    if cordoned:
        node["spec"]["unschedulable"] = True
    if taints:
        node["spec"]["taints"] = taints
    return node


def _pod(name: str, node: str | None, gpus: int, phase: str = "Running", init_gpus: int = 0, as_limit: bool = False) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if as_limit else {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "8"},
                                                                              "limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {"containers": [{"name": "pytorch", "resources": resources}, {"name": "sidecar", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    if init_gpus:
        spec["initContainers"] = [{"name": "warmup", "resources": {"requests": {"nvidia.com/gpu": str(init_gpus)}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "hyperpod-ns-ml-research"},
            "spec": spec, "status": {"phase": phase}}


def cluster(count: int, unlabelled: int = 2) -> Dumps:
    """`count` p5 nodes: 4 under each layer-3 network node, 4 layer-3 under each layer-2; the
    last `unlabelled` have no topology labels. Among every 11: one whose HyperPod health is
    UnschedulablePendingReplacement, one cordoned, one NotReady, one unreachable. GPUs in use:
    8 on every third node, 3 on every fifth (requested as a limit only), an init container
    of 6 on every seventh; finished pods, an unbound pending pod and pods on broken nodes too."""
    items, pods = [], []
    truth = Dumps({"apiVersion": "v1", "kind": "List", "items": items}, {"apiVersion": "v1", "kind": "List", "items": pods})
    for i in range(count):
        name = f"hyperpod-i-{i:04d}"
        labels = {HEALTH: "Schedulable"}
        if i < count - unlabelled:
            labels.update({
                "topology.k8s.aws/network-node-layer-1": "nn-1-0",
                "topology.k8s.aws/network-node-layer-2": f"nn-2-{i // 16:03d}",
                "topology.k8s.aws/network-node-layer-3": f"nn-3-{i // 4:04d}",
            })
        kind = {3: "replacement", 5: "cordoned", 7: "notready", 9: "unreachable"}.get(i % 11)
        if kind == "replacement":
            labels[HEALTH] = "UnschedulablePendingReplacement"
            items.append(_node(name, labels, taints=[{"key": HEALTH, "value": "Unschedulable", "effect": "NoSchedule"}]))
        elif kind == "cordoned":
            items.append(_node(name, labels, cordoned=True, taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]))
        elif kind == "notready":
            items.append(_node(name, labels, ready="False", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]))
        elif kind == "unreachable":
            items.append(_node(name, labels, ready="Unknown", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                                                                      {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]))
        else:
            # A PreferNoSchedule taint only prefers: the node still runs work.
            items.append(_node(name, labels, taints=[{"key": "example.com/soft", "effect": "PreferNoSchedule"}] if i % 13 == 1 else None))
        used = 0
        if i % 3 == 0:
            pods.append(_pod(f"train-{i}", name, 8))
            used += 8
        elif i % 5 == 0:
            pods.append(_pod(f"eval-{i}", name, 3, as_limit=True))
            used += 3
        elif i % 7 == 0:
            pods.append(_pod(f"warm-{i}", name, 2, init_gpus=6))
            used += 6
        pods.append(_pod(f"done-{i}", name, 8, phase="Succeeded" if i % 2 else "Failed"))  # finished: holds nothing
        if kind:
            truth.kinds[name] = kind
        else:
            truth.schedulable.add(name)
            truth.free[name] = GPUS - used
    pods.append(_pod("pending-unbound", None, 8, phase="Pending"))
    return truth
