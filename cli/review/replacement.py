"""Which template changes replace a resource, judged from cfn-lint's resource schemas.

A resource type's schema lists `createOnlyProperties` as JSON pointers
(`/properties/VpcConfig`, `/properties/Orchestrator/Eks`); changing a value under any of
them makes CloudFormation replace the resource.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_MISSING = object()


@lru_cache(maxsize=None)
def create_only_pointers(resource_type: str, region: str = "us-east-1") -> tuple[str, ...]:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER  # slow import: only when asked
    from cfnlint.schema._exceptions import ResourceNotFoundError

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type).schema
    except ResourceNotFoundError:
        return ()
    return tuple(schema.get("createOnlyProperties", ()))


def _resolve(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if head == "*":
        if not isinstance(value, list):
            return _MISSING
        return [_resolve(v, rest) for v in value]
    if isinstance(value, dict) and head in value:
        return _resolve(value[head], rest)
    return _MISSING


def create_only_values(resource: dict, region: str = "us-east-1") -> dict[str, Any]:
    """pointer -> the value found there (absent pointers are left out)."""
    out = {}
    for pointer in create_only_pointers(resource["Type"], region):
        parts = pointer.strip("/").split("/")
        if parts[0] != "properties":
            continue
        found = _resolve(resource.get("Properties", {}), parts[1:])
        if found is not _MISSING:
            out[pointer] = found
    return out


def replaced_by(old: dict, new: dict, region: str = "us-east-1") -> list[str]:
    """The create-only pointers whose value differs between two versions of a resource."""
    if old["Type"] != new["Type"]:
        return ["Type"]
    before, after = create_only_values(old, region), create_only_values(new, region)
    return sorted(p for p in set(before) | set(after) if before.get(p, _MISSING) != after.get(p, _MISSING))


# -- what a change of an instance-group property does to the group's running nodes -------------
#
# CloudFormation updates AWS::SageMaker::Cluster in place whatever changes in a group: its schema
# (cfn-lint, 2026-10) has no create-only property under InstanceGroups (a test reads it). What the
# nodes go through is HyperPod's, each from the source named beside it:
REPLACE = "replace"  # every node of the group goes and a new one comes
ROLL = "roll"  # every node is updated in turn, NotReady or Unschedulable meanwhile
NEW_NODES = "new nodes"  # running nodes keep what they were made with; nodes made from now on take it
IN_PLACE = "in place"  # reconciled on the running nodes, no restart
NOTHING = "nothing"  # nothing happens to running nodes at this deploy (the count is its own change)

_SCHEMA_BEFORE_1_51 = "create-only per group in AWS::SageMaker::Cluster's schema until cfn-lint 1.51: set when an instance is launched"
GROUP_PROPERTY_EFFECTS: dict[str, tuple[str, str]] = {
    "InstanceType": (REPLACE, "UpdateCluster (an instance group's instance type can change): new nodes of the new type; "
                     + _SCHEMA_BEFORE_1_51),
    "InstanceRequirements": (REPLACE, "new nodes of the new types, as InstanceType"),
    "ExecutionRole": (REPLACE, _SCHEMA_BEFORE_1_51 + " (its instance profile)"),
    "ThreadsPerCore": (REPLACE, _SCHEMA_BEFORE_1_51 + " (its CPU options)"),
    "OverrideVpcConfig": (REPLACE, _SCHEMA_BEFORE_1_51 + " (its subnet and groups)"),
    "ImageId": (ROLL, "HyperPod, Update the platform software of a cluster: each node's root volume is replaced, the node "
                "NotReady meanwhile"),
    "ImageReleaseVersion": (ROLL, "an AMI update, as ImageId"),
    "OnStartDeepHealthChecks": (ROLL, "SageMaker API ClusterInstanceGroupSpecification: checks \"performed when the cluster "
                                "instance group is created or updated\"; the nodes are Unschedulable until they pass"),
    "InstanceStorageConfigs": (ROLL, "volumes are attached when a node is created"),
    "TrainingPlanArn": (ROLL, "nodes move onto the plan's reserved capacity"),
    "CapacityRequirements": (ROLL, "nodes move between Spot and On-Demand capacity"),
    "NetworkInterface": (ROLL, "interfaces are attached when a node is created"),
    "LifeCycleConfig": (NEW_NODES, "SageMaker API ClusterLifeCycleConfig.OnCreate: the script \"runs during cluster creation\", "
                        "on each node as it is made"),
    "KubernetesConfig": (IN_PLACE, "SageMaker API ClusterInstanceGroupSpecification.KubernetesConfig: \"the cluster works to "
                         "reconcile the actual state with the declared state for nodes in this instance group\" (labels and "
                         "taints on the running nodes)"),
    "InstanceGroupName": (NOTHING, "the group's key: a new name is a new group and the old one removed"),
    "InstanceCount": (NOTHING, "nodes added or removed, no running node changes"),
    "MinInstanceCount": (NOTHING, "only the group's first transition to InService (SageMaker API)"),
    "ScheduledUpdateConfig": (NOTHING, "a later AMI update on its schedule, not at this deploy"),
    "AutoPatchConfig": (NOTHING, "later patching of idle nodes, not at this deploy"),
    "SlurmConfig": (NOTHING, "Slurm-only"),
    "CurrentCount": (NOTHING, "read-only"),
}


def group_effects(before: dict, after: dict) -> dict[str, list[str]]:
    """effect -> the properties of one instance group (before and after, as CloudFormation takes
    it) whose change has that effect on its running nodes; a property the table does not know
    counts as a roll, never as nothing."""
    out: dict[str, list[str]] = {}
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            out.setdefault(GROUP_PROPERTY_EFFECTS.get(key, (ROLL, ""))[0], []).append(key)
    return out
