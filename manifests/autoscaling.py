"""Karpenter autoscaling on HyperPod as plain data: one HyperpodNodeClass naming the
autoscaled instance groups, and one NodePool over it whose limits let each grow to its
max_count.

HyperPod runs Karpenter itself (hyperpod.autoscaling "karpenter"); these are the objects
its docs have the operator apply after the cluster exists ("Create a NodeClass", "Create a
NodePool", whose sample requirement is the instance-type label with Exists). The limits add
up max_count nodes of each group in the resource its nodes bring (accelerators, else vCPUs).
"""

from __future__ import annotations

from infra.config import InstanceGroup, Settings

NODE_CLASS_API = "karpenter.sagemaker.amazonaws.com/v1"
NODE_CLASS_KIND = "HyperpodNodeClass"
NODE_POOL_API = "karpenter.sh/v1"
# Well-known labels the HyperPod provider accepts in NodePool requirements.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def node_class_name(settings: Settings) -> str:
    return f"{settings.prefix}-{settings.env_name}"


def _limits(groups: list[InstanceGroup]) -> dict[str, str]:
    totals: dict[str, int] = {}
    for g in groups:
        spec = g.spec
        resource, per_node = (spec.accelerator_resource, spec.accelerators) if spec.is_accelerated else ("cpu", spec.vcpus)
        totals[resource] = totals.get(resource, 0) + per_node * g.max_count
    return {k: str(v) for k, v in sorted(totals.items())}


def objects(settings: Settings) -> list[dict]:
    groups = [g for g in settings.hyperpod.instance_groups if g.autoscaled]
    if not groups:
        return []
    name = node_class_name(settings)
    node_class = {
        "apiVersion": NODE_CLASS_API,
        "kind": NODE_CLASS_KIND,
        "metadata": {"name": name},
        "spec": {"instanceGroups": [g.name for g in groups]},
    }
    pool = {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": NODE_CLASS_API.split("/")[0], "kind": NODE_CLASS_KIND, "name": name},
                    # GPU nodes are not recycled on a timer; Karpenter still removes empty ones.
                    "expireAfter": "Never",
                    "requirements": [{"key": INSTANCE_TYPE_LABEL, "operator": "Exists"}],
                }
            },
            "limits": _limits(groups),
        },
    }
    return [node_class, pool]
