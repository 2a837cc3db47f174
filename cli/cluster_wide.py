"""Changes that reach past one resource, said in words: the dependencies chart's values, the
EKS add-ons' configuration and versions, and the HyperPod cluster's modes and node labels.

Lines for what changes; a callout where it disrupts running work or changes how the whole
cluster behaves from then on:
- GPU OPERATOR / DEVICE PLUGIN: the chart swaps its NVIDIA device plugin for the GPU operator
  (which a MIG profile needs) or back: every GPU node's device plugin goes, and until the other
  registers no node advertises its GPUs;
- MIG: a group's `nvidia.com/mig.config` label changes, so the GPU operator's MIG manager
  re-partitions every GPU of the group ("MIG Manager requires that no user workloads are
  running on the GPUs being configured": NVIDIA GPU Operator docs, GPU Operator with MIG);
- PROVISIONING MODE: the cluster's NodeProvisioningMode changes (Karpenter needs Continuous):
  SageMaker's UpdateCluster takes only `Continuous` (botocore's SageMaker model), so no update
  sets it back.
"""

from __future__ import annotations

import json

from cli.assembly import StackSummary, manifest_text, of_type

DEVICE_PLUGIN = "nvidia-device-plugin.devicePlugin.enabled"
GPU_OPERATOR = "gpu-operator.enabled"
MIG_LABEL = "nvidia.com/mig.config"
# Changed keys a line names before it counts the rest.
SHOWN_KEYS = 6


def _json(value) -> dict:
    """A JSON property (a string, or a join with tokens) as data; {} where it is none."""
    if value is None:
        return {}
    try:
        data = json.loads(manifest_text(value))
    except (TypeError, KeyError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _flat(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict) and value:
        out = {}
        for key, item in value.items():
            out |= _flat(item, f"{prefix}.{key}" if prefix else key)
        return out
    return {prefix: value}


_UNSET = object()


def _shown(value) -> str:
    return "(unset)" if value is _UNSET else json.dumps(value)


def _moves(before: dict, after: dict) -> list[str]:
    a, b = _flat(before), _flat(after)
    keys = [k for k in [*b, *(k for k in a if k not in b)] if a.get(k, _UNSET) != b.get(k, _UNSET)]
    moves = [f"{k} {_shown(a.get(k, _UNSET))} -> {_shown(b.get(k, _UNSET))}" for k in keys[:SHOWN_KEYS]]
    return moves + ([f"and {len(keys) - SHOWN_KEYS} more"] if len(keys) > SHOWN_KEYS else [])


def _by_key(stacks: list[StackSummary], type_: str, key) -> dict[str, dict]:
    return {key(stack, lid, res): res.get("Properties", {}) for stack, lid, res in of_type(stacks, type_)}


def _groups(stacks: list[StackSummary]) -> dict[tuple[str, str], dict]:
    """(stack, group name) -> the instance group's properties."""
    return {
        (stack.name, group["InstanceGroupName"]): group
        for stack, _, res in of_type(stacks, "AWS::SageMaker::Cluster")
        for group in res.get("Properties", {}).get("InstanceGroups", [])
    }


def compare(before: list[StackSummary], after: list[StackSummary]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(lines, [(callout, the config fields it may come from)])."""
    lines: list[str] = []
    callouts: list[tuple[str, list[str]]] = []
    old_groups, new_groups = _groups(before), _groups(after)
    mig_moved = []
    for key in sorted(old_groups.keys() & new_groups.keys()):
        stack, name = key
        a = (old_groups[key].get("KubernetesConfig") or {}).get("Labels") or {}
        b = (new_groups[key].get("KubernetesConfig") or {}).get("Labels") or {}
        if a.get(MIG_LABEL) != b.get(MIG_LABEL):
            mig_moved.append(name)
            callouts.append((
                f"MIG: every GPU of instance group {name} in {stack} is re-partitioned ({MIG_LABEL} "
                f"{a.get(MIG_LABEL, '(none)')} -> {b.get(MIG_LABEL, '(none)')}): the GPU operator's MIG manager needs no "
                "workload running on those GPUs, so the jobs on them stop",
                [f"hyperpod.instance_groups[{name}].mig_profile"],
            ))
        rest_a, rest_b = {k: v for k, v in a.items() if k != MIG_LABEL}, {k: v for k, v in b.items() if k != MIG_LABEL}
        if rest_a != rest_b:
            lines.append(f"Node labels of instance group {name}: {'; '.join(_moves(rest_a, rest_b))}")
        taints_a, taints_b = ((g.get("KubernetesConfig") or {}).get("Taints") or [] for g in (old_groups[key], new_groups[key]))
        if taints_a != taints_b:
            lines.append(f"Node taints of instance group {name}: {_taints(taints_a)} -> {_taints(taints_b)}")
    mig_fields = [f"hyperpod.instance_groups[{g}].mig_profile" for g in mig_moved] or ["hyperpod.instance_groups"]

    old_charts = _by_key(before, "Custom::AWSCDK-EKS-HelmChart", lambda s, lid, r: r.get("Properties", {}).get("Release", lid))
    new_charts = _by_key(after, "Custom::AWSCDK-EKS-HelmChart", lambda s, lid, r: r.get("Properties", {}).get("Release", lid))
    for release in sorted(old_charts.keys() & new_charts.keys()):
        a, b = _json(old_charts[release].get("Values")), _json(new_charts[release].get("Values"))
        if a == b:
            continue
        lines.append(f"Chart {release} values: {'; '.join(_moves(a, b))}")
        fa, fb = _flat(a), _flat(b)
        plugin = (fa.get(DEVICE_PLUGIN, False), fb.get(DEVICE_PLUGIN, False))
        operator = (fa.get(GPU_OPERATOR, False), fb.get(GPU_OPERATOR, False))
        shown = f"{DEVICE_PLUGIN} {_shown(fa.get(DEVICE_PLUGIN, _UNSET))} -> {_shown(fb.get(DEVICE_PLUGIN, _UNSET))}, " \
                f"{GPU_OPERATOR} {_shown(fa.get(GPU_OPERATOR, _UNSET))} -> {_shown(fb.get(GPU_OPERATOR, _UNSET))}"
        if plugin == (True, False) and operator == (False, True):
            callouts.append((
                f"GPU OPERATOR: chart {release} swaps its NVIDIA device plugin for the GPU operator on every GPU node of the "
                f"cluster ({shown}): until the operator's device plugin registers, no node advertises its GPUs and no GPU pod "
                "is scheduled",
                mig_fields,
            ))
        elif plugin == (False, True) and operator == (True, False):
            callouts.append((
                f"DEVICE PLUGIN: chart {release} swaps the GPU operator for its NVIDIA device plugin on every GPU node of the "
                f"cluster ({shown}): MIG slices are no longer advertised, and until the device plugin registers no GPU pod "
                "is scheduled",
                mig_fields,
            ))

    old_addons = _by_key(before, "AWS::EKS::Addon", lambda s, lid, r: str(r.get("Properties", {}).get("AddonName", lid)))
    new_addons = _by_key(after, "AWS::EKS::Addon", lambda s, lid, r: str(r.get("Properties", {}).get("AddonName", lid)))
    for name in sorted(old_addons.keys() & new_addons.keys()):
        a, b = old_addons[name], new_addons[name]
        if a.get("AddonVersion") != b.get("AddonVersion"):
            lines.append(f"Add-on {name} version {a.get('AddonVersion') or '(EKS default)'} -> {b.get('AddonVersion') or '(EKS default)'}")
        ca, cb = _json(a.get("ConfigurationValues")), _json(b.get("ConfigurationValues"))
        if ca != cb:
            lines.append(f"Add-on {name} configuration: {'; '.join(_moves(ca, cb))}")

    old_clusters = _by_key(before, "AWS::SageMaker::Cluster", lambda s, lid, r: s.name)
    new_clusters = _by_key(after, "AWS::SageMaker::Cluster", lambda s, lid, r: s.name)
    for stack in sorted(old_clusters.keys() & new_clusters.keys()):
        a, b = old_clusters[stack], new_clusters[stack]
        mode_a, mode_b = a.get("NodeProvisioningMode"), b.get("NodeProvisioningMode")
        if mode_a != mode_b:
            callouts.append((
                f"PROVISIONING MODE: the HyperPod cluster in {stack} switches to "
                f"{'continuous provisioning' if mode_b == 'Continuous' else 'the standard provisioning of earlier releases'} "
                f"(NodeProvisioningMode {mode_a or '(unset)'} -> {mode_b or '(unset)'}): from now on groups scale node by node "
                "while the cluster stays InService, and CloudFormation moves on before new nodes exist (the node gates wait "
                "for them); SageMaker's UpdateCluster takes only Continuous, so no update sets it back",
                ["hyperpod.autoscaling", "hyperpod.continuous_provisioning"],
            ))
        scaling_a, scaling_b = a.get("AutoScaling") or {}, b.get("AutoScaling") or {}
        if scaling_a != scaling_b:
            lines.append(f"Autoscaling of the HyperPod cluster in {stack}: {_scaling(scaling_a)} -> {_scaling(scaling_b)}")
    return lines, callouts


def _taints(taints: list) -> str:
    return ", ".join(f"{t.get('Key')}={t.get('Value', '')}:{t.get('Effect')}" for t in taints) or "none"


def _scaling(config: dict) -> str:
    return f"{config.get('AutoScalerType', '?')} {config.get('Mode', '?')}" if config else "none"
