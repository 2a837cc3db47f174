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
  sets it back;
- NODE RECOVERY OFF / ON: the cluster's NodeRecovery changes: with `None` a faulty node is only
  labelled and stays as it is, so the jobs on it are not resumed on a replacement ("When set to
  None, cluster administrators will need to manually manage any faulty cluster instances":
  SageMaker API, CreateCluster NodeRecovery);
- INTERNET PATH LOST / GAINED: the VPC's NAT gateways go to 0 or its internet gateway goes (or
  back): the private subnets lose (or gain) their way out, and with it every public registry;
- CONTROL PLANE UPGRADE: the EKS cluster's Kubernetes version moves up, which EKS cannot undo
  ("Once you upgrade a cluster, you can't downgrade": EKS user guide, Update existing cluster to
  new Kubernetes version), with what the version leaves behind: HyperPod's documented range, the
  nodes' AMI, the add-on pins with no build known for it, and `upgrade-plan`; a downgrade, or a
  move of more than one minor version ("Control plane version upgrades must be done for one
  minor version at a time": EKS's eksctl guide, Cluster upgrades), is REFUSED.
"""

from __future__ import annotations

import json

from cli.review.assembly import StackSummary, manifest_text, of_type
from infra import versions

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
    if value == {} and not prefix:
        return {}
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


def compare(before: list[StackSummary], after: list[StackSummary], env: str | None = None) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(lines, [(callout, the config fields it may come from)]); `env` the environment, where
    known, for the commands a callout names."""
    lines: list[str] = []
    callouts: list[tuple[str, list[str]]] = _control_plane(before, after, env) + _network(before, after, lines)
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
            evicting = [t for t in taints_b if t.get("Effect") == "NoExecute" and t not in taints_a]
            if evicting:
                # Kubernetes, Taints and Tolerations: NoExecute evicts the pods already running that do not tolerate it.
                callouts.append((
                    f"PODS EVICTED: instance group {name} in {stack} gets a NoExecute taint ({_taints(evicting)}), reconciled onto "
                    "its running nodes: every pod there that does not tolerate it is evicted at once, the running job's included",
                    [f"hyperpod.instance_groups[{name}].taints"],
                ))
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
    callouts += _serving(old_addons, new_addons)
    for name in sorted(old_addons.keys() & new_addons.keys()):
        a, b = old_addons[name], new_addons[name]
        if a.get("AddonVersion") != b.get("AddonVersion"):
            unpinned = "(unpinned: EKS keeps the installed version)"
            lines.append(f"Add-on {name} version {a.get('AddonVersion') or unpinned} -> {b.get('AddonVersion') or unpinned}")
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
        recovery_a, recovery_b = a.get("NodeRecovery"), b.get("NodeRecovery")
        if recovery_a != recovery_b and "None" in (recovery_a, recovery_b):
            moved = f"NodeRecovery {recovery_a or '(unset)'} -> {recovery_b or '(unset)'}"
            if recovery_b == "None":
                text = (f"NODE RECOVERY OFF: the HyperPod cluster in {stack} stops recovering faulty nodes ({moved}): a node that "
                        "fails a health check is only labelled and stays as it is, and the jobs on it are not resumed on a "
                        "replacement until someone reboots or replaces it by hand (SageMaker API, CreateCluster NodeRecovery: "
                        f"\"{NODE_RECOVERY_NONE}\")")
            else:
                text = (f"NODE RECOVERY ON: the HyperPod cluster in {stack} recovers faulty nodes itself from now on ({moved}): "
                        "HyperPod reboots or replaces a node that fails a health check, and the jobs on it restart on the "
                        "replacement (SageMaker API, CreateCluster NodeRecovery)")
            callouts.append((text, ["hyperpod.node_recovery"]))
        scaling_a, scaling_b = a.get("AutoScaling") or {}, b.get("AutoScaling") or {}
        if scaling_a != scaling_b:
            lines.append(f"Autoscaling of the HyperPod cluster in {stack}: {_scaling(scaling_a)} -> {_scaling(scaling_b)}")
    return lines, callouts


def _taints(taints: list) -> str:
    return ", ".join(f"{t.get('Key')}={t.get('Value', '')}:{t.get('Effect')}" for t in taints) or "none"


def _scaling(config: dict) -> str:
    return f"{config.get('AutoScalerType', '?')} {config.get('Mode', '?')}" if config else "none"


# botocore's SageMaker model, CreateCluster's NodeRecovery (a test reads it there).
NODE_RECOVERY_NONE = "When set to None, cluster administrators will need to manually manage any faulty cluster instances"


def _count(stacks: list[StackSummary], type_: str) -> int:
    return sum(1 for _ in of_type(stacks, type_))


def _network(before: list[StackSummary], after: list[StackSummary], lines: list[str]) -> list[tuple[str, list[str]]]:
    """The VPC's way out: its NAT gateways (the private subnets' route to the internet) and its
    internet gateway (the public subnets', and the NAT gateways' own)."""
    nat_a, nat_b = _count(before, "AWS::EC2::NatGateway"), _count(after, "AWS::EC2::NatGateway")
    igw_a, igw_b = _count(before, "AWS::EC2::InternetGateway"), _count(after, "AWS::EC2::InternetGateway")
    if (nat_a, igw_a) == (nat_b, igw_b):
        return []
    moved = [f"NAT gateways {nat_a} -> {nat_b}"] if nat_a != nat_b else []
    moved += [f"internet gateway {'removed' if igw_a > igw_b else 'added'}"] if bool(igw_a) != bool(igw_b) else []
    fields = ["network.nat_gateways", "network.existing_vpc"]
    if (nat_a and not nat_b) or (igw_a and not igw_b):
        return [(
            f"INTERNET PATH LOST: the VPC loses its way to the internet ({', '.join(moved)}): nodes and pods reach no public "
            "registry or endpoint from then on (an image not copied into ECR is never pulled, an AWS service without a VPC "
            "endpoint is unreachable); a job or add-on that pulls or calls out fails where it worked",
            fields,
        )]
    if (nat_b and not nat_a) or (igw_b and not igw_a):
        return [(
            f"INTERNET PATH GAINED: the VPC gains a way to the internet ({', '.join(moved)}): nodes and pods can reach any "
            "public address from then on (egress to 0.0.0.0/0 through NAT), which a closed network was chosen to prevent",
            fields,
        )]
    lines.append(f"Network: {', '.join(moved)} (fewer NAT gateways: an AZ's private subnets route through another AZ's)"
                 if nat_b < nat_a else f"Network: {', '.join(moved)}")
    return []


def _eks_versions(stacks: list[StackSummary]) -> dict[str, str]:
    """stack/cluster name (its logical id where the name is not literal) -> Kubernetes version."""
    return {f"{stack.name}/{name if isinstance(name := res['Properties'].get('Name'), str) else lid}": res["Properties"]["Version"]
            for stack, lid, res in of_type(stacks, "AWS::EKS::Cluster") if isinstance(res.get("Properties", {}).get("Version"), str)}


def _addon_pins(stacks: list[StackSummary]) -> dict[str, str]:
    """EKS add-on name -> the version a template pins (those left to EKS are not here)."""
    return {str(res["Properties"]["AddonName"]): res["Properties"]["AddonVersion"] for _, _, res in of_type(stacks, "AWS::EKS::Addon")
            if isinstance(res.get("Properties", {}).get("AddonVersion"), str)}


def _control_plane(before: list[StackSummary], after: list[StackSummary], env: str | None) -> list[tuple[str, list[str]]]:
    old, new = _eks_versions(before), _eks_versions(after)
    callouts = []
    for key in sorted(old.keys() & new.keys()):
        a, b = old[key], new[key]
        if a == b:
            continue
        stack, resource = key.split("/", 1)
        try:
            va, vb = versions.parse(a), versions.parse(b)
        except ValueError:
            continue
        if vb < va:
            callouts.append((f"REFUSED: the EKS cluster `{resource}` in {stack} would go from Kubernetes {a} down to {b}: EKS "
                             f"cannot downgrade a cluster (\"{ONE_WAY}\": EKS user guide, {UPDATE_PAGE})", ["eks.version"]))
            continue
        if vb[0] != va[0] or vb[1] > va[1] + 1:
            callouts.append((f"REFUSED: the EKS cluster `{resource}` in {stack} would go from Kubernetes {a} to {b} in one "
                             f"update: \"{ONE_MINOR}\" (EKS's eksctl guide, Cluster upgrades); `{_upgrade_plan(b, env)}` lists "
                             "each step", ["eks.version"]))
            continue
        parts = [f"CONTROL PLANE UPGRADE: the EKS cluster `{resource}` in {stack} goes from Kubernetes {a} to {b}, which cannot "
                 f"be undone (\"{ONE_WAY}\": EKS user guide, {UPDATE_PAGE})"]
        parts += [f"{b} is outside the documented range of {r.component} ({versions.fmt(r.oldest)}-{versions.fmt(r.newest)})"
                  for r in versions.COMPONENT_RANGES if not r.oldest <= vb <= r.newest]
        clusters = [res["Properties"].get("ClusterName") for _, _, res in of_type(after, "AWS::SageMaker::Cluster")]
        named = " ".join(f"--cluster-name {c}" for c in clusters if isinstance(c, str)) or "--cluster-name <hyperpod cluster>"
        if clusters:
            parts.append(f"the HyperPod nodes keep their AMI, and its kubelet, until `aws sagemaker update-cluster-software {named}` "
                         "rolls each instance group onto the AMI release for the new version")
        off = pins_off(_addon_pins(after), b)
        if off:
            parts.append(f"add-on pins with no build known for {b}: {'; '.join(off)}")
        parts.append(f"`{_upgrade_plan(b, env)}` lists each step")
        callouts.append(("; ".join(parts), ["eks.version"]))
    return callouts


ONE_WAY = "Once you upgrade a cluster, you can't downgrade to a previous version"
ONE_MINOR = "Control plane version upgrades must be done for one minor version at a time"
UPDATE_PAGE = "Update existing cluster to new Kubernetes version (update-cluster.html)"


def _upgrade_plan(version: str, env: str | None) -> str:
    return f"hyperpod-cdk upgrade-plan --to {version} -c env={env or 'NAME'}"


def pins_off(pins: dict[str, str], kubernetes: str) -> list[str]:
    """The add-on pins that do not go with `kubernetes`, or that no offline source pairs with it
    (infra/versions.py pins_off_version: the one rule validate reads too), each in a few words."""
    out = []
    for off in versions.pins_off_version(kubernetes, pins):
        row = versions.offline_addon_release(off.addon, kubernetes)
        if off.known:
            out.append(f"{off.addon} {off.pinned} (not for {kubernetes}" + (f"; the build for {kubernetes}: {row.version})" if row else ")"))
        else:
            out.append(f"{off.addon} {off.pinned} (no build known offline for {kubernetes}: preflight asks the account)")
    return out


def _serving(before: dict[str, dict], after: dict[str, dict]) -> list[tuple[str, list[str]]]:
    """The inference operator arriving, or its version moving: what each endpoint then costs and
    exposes, and that the operator managing every endpoint is replaced (docs/serving.md)."""
    from cli.review import prices
    from infra.config.inference import INFERENCE_ADDON_NAME as name

    if name in after and name not in before:
        return [(
            "SERVING: this deploy installs the HyperPod inference operator: every endpoint a team applies gets an Application "
            f"Load Balancer of its own (${prices.ALB_HOUR} an hour, ${prices.ALB_HOUR * prices.HOURS_PER_MONTH:,.2f} a month, plus "
            f"${prices.ALB_LCU_HOUR} per capacity unit an hour, {prices.REGION} rates; answering from the VPC's public side where its "
            "scheme is internet-facing), its model servers answer on their port from any address (the serving team's namespace's "
            "one opening), and it takes GPU nodes at the inference priority, preempting lower-priority training",
            ["inference.enabled"],
        )]
    if name in before and name in after and before[name].get("AddonVersion") != after[name].get("AddonVersion"):
        a, b = (x[name].get("AddonVersion") or "(EKS default)" for x in (before, after))
        return [(
            f"SERVING OPERATOR UPDATED: {name} {a} -> {b}: the controller that reconciles every endpoint's model servers and load "
            "balancer is replaced while they serve; read its release notes first (3.0 needed new execution-role permissions "
            "before the upgrade)",
            ["inference.version"],
        )]
    return []
