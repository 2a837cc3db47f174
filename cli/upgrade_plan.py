"""`hyperpod-cdk upgrade-plan --to 1.N`: the ordered steps from the cluster's Kubernetes version
to 1.N, one control-plane minor version at a time (EKS upgrades no further in one go).

Each step: the add-on versions published for that Kubernetes version (from the account's
DescribeAddonVersions with --from-account, else the dated table in infra/versions.py), the
task governance Kueue CRD migration where the add-on crosses it, the `cdk.json` change and the
commands, then the HyperPod AMI update of each instance group with its rolling batch.
Read-only: it prints, it changes nothing.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from dataclasses import dataclass, field

from infra import versions
from infra.config import CORE_ADDON_NAMES, InstanceGroup, RollingBatch, Settings

CORE_ADDONS = {name: key for key, name in CORE_ADDON_NAMES.items()}
TASK_GOVERNANCE = "amazon-sagemaker-hyperpod-taskgovernance"
OFFLINE_SOURCE = "the dated table in infra/versions.py"


class Refused(ValueError):
    """A target the plan cannot lead to, in one line."""


@dataclass(frozen=True)
class Addon:
    name: str  # EKS add-on name
    path: str  # its config section (the version pin is <path>.version)
    pinned: str | None


@dataclass
class AddonStep:
    addon: Addon
    version: str | None  # the version for this step's Kubernetes version; None: not known here
    source: str


@dataclass
class Step:
    before: str
    after: str
    addons: list[AddonStep]
    warnings: list[str] = field(default_factory=list)
    # EKS upgrade insights (UPGRADE_READINESS) for this version that are not PASSING; None: not asked.
    insights: list[str] | None = None
    # None: may cross (the version before is unknown); True: crosses; False: does not.
    migration: bool | None = False
    migration_to: str | None = None
    # Pins this step's cdk.json change does not move and that do not go with its version
    # (versions.pins_off_version): "<config path> <pin> <why>".
    left_behind: list[str] = field(default_factory=list)


def addons_of(settings: Settings) -> list[Addon]:
    """Every EKS add-on a deploy of `settings` creates, with its config section and pin."""
    from addons import registry
    from addons.base import ManagedAddon

    core = settings.eks.core_addons
    # On an existing cluster its owner runs the core add-ons; only those a deploy installs are ours to pin.
    installed = settings.core_addons_installed
    out = [Addon(name, f"eks.core_addons.{key}", getattr(core, key).version) for name, key in CORE_ADDONS.items() if key in installed]
    for addon in registry.plan(settings):
        if isinstance(addon, ManagedAddon) and not addon.existing:
            out.append(Addon(addon.eks_name, addon.config_path, addon.config.version))
    return out


def owners_addons(settings: Settings) -> list[str]:
    """The EKS add-ons a deploy uses but does not install, on a cluster this project joins:
    the core ones it leaves to the cluster, and those config adopts (addons.<key>.existing)."""
    from addons import registry
    from addons.base import ManagedAddon

    if not settings.uses_existing_cluster:
        return []
    core = [name for name, key in CORE_ADDONS.items() if key not in settings.core_addons_installed]
    return core + [a.eks_name for a in registry.plan(settings) if isinstance(a, ManagedAddon) and a.existing]


class OfflineVersions:
    """Add-on versions from infra/versions.py; what is deployed is what config pins."""

    name = OFFLINE_SOURCE

    def current(self, settings: Settings) -> str:
        return settings.eks.version

    def deployed(self, settings: Settings, addon: Addon) -> str | None:
        return addon.pinned

    def offers(self, kubernetes: str) -> bool:
        return True  # offline, aws-cdk-lib's newest version is the bound (EKS offered 1.37 in Dec 2026)

    def insights(self, settings: Settings, kubernetes: str) -> list[str] | None:
        return None

    def version_for(self, addon: Addon, kubernetes: str) -> tuple[str | None, str]:
        row = versions.offline_addon_release(addon.name, kubernetes)
        if row is None:
            return None, f"not in {OFFLINE_SOURCE}: aws eks describe-addon-versions --kubernetes-version {kubernetes} --addon-name {addon.name}"
        return row.version, f"{row.source}, read {row.seen}"


class AccountVersions:
    """The account's answers: the cluster's version (DescribeCluster), each add-on's deployed
    version (DescribeAddon) and the default version for a Kubernetes version (DescribeAddonVersions)."""

    name = "the account (DescribeAddonVersions)"

    def __init__(self, eks):
        self.eks = eks

    def current(self, settings: Settings) -> str:
        try:
            return self.eks.describe_cluster(name=settings.eks_cluster_name)["cluster"]["version"]
        except self.eks.exceptions.ResourceNotFoundException:
            raise Refused(
                f"no EKS cluster named {settings.eks_cluster_name} in {self.eks.meta.region_name}; "
                "drop --from-account to plan from config"
            ) from None

    def offers(self, kubernetes: str) -> bool:
        found = self.eks.describe_cluster_versions(clusterVersions=[kubernetes]).get("clusterVersions", [])
        return any(v.get("versionStatus", "UNSUPPORTED") != "UNSUPPORTED" for v in found)

    def insights(self, settings: Settings, kubernetes: str) -> list[str] | None:
        """EKS's upgrade-readiness insights for `kubernetes` that are not passing (deprecated APIs
        in use, add-on or node version skew): what would break the control-plane upgrade."""
        pages = self.eks.get_paginator("list_insights").paginate(
            clusterName=settings.eks_cluster_name, filter={"categories": ["UPGRADE_READINESS"], "kubernetesVersions": [kubernetes]}
        )
        out = []
        for page in pages:
            for insight in page.get("insights", []):
                status = insight.get("insightStatus", {})
                if status.get("status") != "PASSING":
                    out.append(f"{status.get('status', 'UNKNOWN')}: {insight.get('name', insight.get('id'))}: {status.get('reason', '')}".rstrip(": "))
        return out

    def deployed(self, settings: Settings, addon: Addon) -> str | None:
        try:
            return self.eks.describe_addon(clusterName=settings.eks_cluster_name, addonName=addon.name)["addon"]["addonVersion"]
        except self.eks.exceptions.ResourceNotFoundException:
            return None

    def version_for(self, addon: Addon, kubernetes: str) -> tuple[str | None, str]:
        found = self.eks.describe_addon_versions(kubernetesVersion=kubernetes, addonName=addon.name).get("addons", [])
        offered = [v for a in found for v in a.get("addonVersions", [])]
        if not offered:
            return None, f"the account publishes no {addon.name} for Kubernetes {kubernetes}: CreateAddon and UpdateAddon fail"
        default = next(
            (v for v in offered if any(c.get("clusterVersion") == kubernetes and c.get("defaultVersion") for c in v.get("compatibilities", []))),
            None,
        )
        chosen = default or max(offered, key=lambda v: _version_key(v["addonVersion"]))
        return chosen["addonVersion"], "DescribeAddonVersions, " + ("the default" if default else "the newest listed")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def _newest_supported() -> tuple[int, int]:
    return versions.MAX_EKS_VERSION


def build(settings: Settings, target: str, source) -> tuple[str, list[Step]]:
    """(the version now, the steps to `target`). Raises Refused for a target it cannot reach."""
    if not re.fullmatch(r"1\.\d{1,2}", target):
        raise Refused(f"--to {target}: give a Kubernetes minor version, like 1.34")
    current = source.current(settings)
    now, goal = versions.parse(current), versions.parse(target)
    if goal < now:
        raise Refused(f"--to {target}: the cluster runs {current}, and EKS cannot downgrade a control plane")
    if goal > _newest_supported():
        cdk = importlib.metadata.version("aws-cdk-lib")
        raise Refused(
            f"--to {target}: beyond {versions.fmt(_newest_supported())}, the newest Kubernetes version aws-cdk-lib {cdk}'s "
            "KubernetesVersion and kubectl layers offer; upgrade aws-cdk-lib first"
        )
    if goal > now and not source.offers(target):
        raise Refused(f"--to {target}: EKS does not offer Kubernetes {target} in this region (DescribeClusterVersions)")
    addons = addons_of(settings)
    deployed = {a.name: source.deployed(settings, a) for a in addons}
    steps, maybe_said = [], False
    pins = {a.name: a.pinned for a in addons if a.pinned}
    for minor in range(now[1] + 1, goal[1] + 1):
        before, after = f"1.{minor - 1}", f"1.{minor}"
        step = Step(before, after, [AddonStep(a, *source.version_for(a, after)) for a in addons])
        pins.update({s.addon.name: s.version for s in step.addons if s.version})
        paths = {a.name: a.path for a in addons}
        step.left_behind = [f"{paths[off.addon]}.version {off.pinned} {off.reason}"
                            for off in versions.pins_off_version(after, pins) if off.known]
        step.warnings = versions.support_warnings(after)
        if minor == now[1] + 1:  # EKS judges readiness for the next version of the running cluster only
            step.insights = source.insights(settings, after)
        _, _, package = versions.kubectl_layer_module(after)
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            step.warnings.append(f"the kubectl layer for {after} is not installed: pip install {package}")
        governance = next((s for s in step.addons if s.addon.name == TASK_GOVERNANCE), None)
        if governance is not None:
            before_tg, after_tg = deployed.get(TASK_GOVERNANCE), governance.version
            if after_tg is None:  # the version for this step is not known here
                past = before_tg is not None and versions.addon_version_at_least(before_tg, versions.TASK_GOVERNANCE_CRD_MIGRATION)
                step.migration = False if past or maybe_said else None
            else:
                step.migration = versions.crosses_task_governance_migration(before_tg, after_tg)
                if step.migration is None and maybe_said:
                    step.migration = False
                deployed[TASK_GOVERNANCE] = after_tg
            # An unknown crossing is called out once, at the first step that may cross.
            maybe_said = maybe_said or step.migration is None
            step.migration_to = after_tg
        steps.append(step)
    return current, steps


def _batch(group: InstanceGroup) -> tuple[RollingBatch, int, tuple[str, ...]]:
    """The group's rolling batch, wait and rollback alarms: its scheduled update's or its
    auto-patching's, else one instance at a time."""
    rolling = group.scheduled_update or group.auto_patch
    if rolling is None:
        return RollingBatch(), 0, ()
    return rolling.batch, rolling.wait_seconds, rolling.rollback_alarms


def ami_lines(settings: Settings, after: str) -> list[str]:
    """How each instance group's nodes move onto the HyperPod AMI for `after`."""
    lines = []
    for i, group in enumerate(settings.hyperpod.instance_groups):
        where = f"hyperpod.instance_groups[{i}]"
        if group.image_id:
            lines.append(f"{group.name}: a custom AMI ({where}.image_id): rebuild it from the HyperPod AMI for Kubernetes {after} "
                         "and set its new id; the deploy rolls the group onto it")
            continue
        if group.image_release_version:
            lines.append(f"{group.name}: set {where}.image_release_version to the HyperPod AMI release for Kubernetes {after} "
                         "(HyperPod AMI release notes); the deploy runs UpdateClusterSoftware on the group")
            continue
        lines.append(_rolling_update(settings, group))
    return lines


def _rolling_update(settings: Settings, group: InstanceGroup) -> str:
    """The group's UpdateClusterSoftware, in its own rolling batches."""
    batch, wait, alarms = _batch(group)
    deployment = {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": batch.cfn_type, "Value": batch.value}},
                  "WaitIntervalInSeconds": wait}
    if alarms:
        deployment["AutoRollbackConfiguration"] = [{"AlarmName": a} for a in alarms]
    unit = "instance" if batch.unit == "instances" else "percent"
    return (
        f"{group.name}: {batch.value} {unit}{'s' if unit == 'instance' and batch.value > 1 else ''} at a time"
        f"{f', {wait} s apart' if wait else ''}:\n"
        f"      aws sagemaker update-cluster-software --region {settings.region} --cluster-name {settings.hyperpod_cluster_name} "
        f"--instance-groups '{json.dumps([{'InstanceGroupName': group.name}], separators=(',', ':'))}' "
        f"--deployment-config '{json.dumps(deployment, separators=(',', ':'))}'"
    )


def guard_lines(settings: Settings) -> list[str]:
    """How nodes made before the fail-closed metadata guard get it. HyperPod runs OnCreate on
    new and replaced nodes only; UpdateClusterSoftware re-runs the lifecycle scripts on a whole
    instance group ("Updating a cluster with new or updated lifecycle scripts", HyperPod docs),
    from the prefix the deploy points the group at; BatchReplaceClusterNodes replaces single nodes."""
    return [
        "existing nodes: the lifecycle scripts' metadata guard (iptables waiting for the xtables lock; kubelet requires it, so "
        "a node without the rule runs no pod) reaches nodes made before it only when they run the scripts again. After the "
        "deploy that brings it, roll each group (UpdateClusterSoftware re-runs the lifecycle scripts; it also replaces the "
        "root volume, so drain the group's jobs first), then `hyperpod-cdk accept` proves it on every group:",
        *(f"  {_rolling_update(settings, g)}" for g in settings.hyperpod.instance_groups),
        f"  or a node at a time: aws sagemaker batch-replace-cluster-nodes --region {settings.region} "
        f"--cluster-name {settings.hyperpod_cluster_name} --node-ids <i-...>",
    ]


def rollback_lines(settings: Settings, step: Step, previous: dict[str, str | None]) -> list[str]:
    """How to take the step back within EKS's rollback window, in the rollback page's order, and what
    it leaves as it is. `previous`: each add-on's version before the step (None: unknown here)."""
    cluster, region = settings.eks_cluster_name, settings.region
    if settings.uses_existing_cluster:
        return [f"  rollback: the control plane is its owner's (eks.existing_cluster): within {versions.ROLLBACK_WINDOW_DAYS} days "
                f"they may take it back to {step.before} ({versions.ROLLBACK_PAGE}); the add-ons this project installs and the "
                "HyperPod nodes are not reverted with it: pin the add-ons back as below"]
    moved = {a.addon.name: a.version for a in step.addons}
    back = [f"{name} {version}" for name, version in previous.items() if version and moved.get(name) not in (None, version)]
    unknown = [name for name, version in previous.items() if not version]
    lines = [
        f"  rollback, if {step.after} must be undone: EKS reverts the control plane (API server, control-plane components, "
        f"platform version) to {step.before} within {versions.ROLLBACK_WINDOW_DAYS} days of the upgrade, one minor version, "
        f"never on a cluster created at {step.after} ({versions.ROLLBACK_PAGE}). It does NOT revert: the add-ons, HyperPod's "
        "nodes and their AMI, etcd data written by the newer API server, or a CRD migration (task governance's Kueue storage "
        "move to v1beta2 is one way); and a CloudFormation stack rollback to the older template does not start it. In order:",
        f"     r1. what blocks it: aws eks list-insights --region {region} --cluster-name {cluster} "
        f"--filter '{json.dumps({'categories': ['ROLLBACK_READINESS']}, separators=(',', ':'))}' (ERROR blocks; --force skips the insights, not the window)",
        f"     r2. HyperPod's nodes first (a kubelet may not be newer than the API server; HyperPod documents no rollback of its "
        f"own): a group already on the AMI for {step.after} (3. above) comes back to the release it ran for {step.before} "
        "(image_release_version, or image_id) and deploys; so hold 3. until the upgrade is kept or the window has passed",
        f"     r3. the add-ons this step moved, which EKS leaves at their {step.after} versions, back to what they ran on "
        f"{step.before}: " + (", ".join(back) if back else "none pinned here")
        + (f"; {', '.join(unknown)}: whatever ran before (aws eks describe-addon-versions --kubernetes-version {step.before})" if unknown else "")
        + f" (aws eks update-addon --region {region} --cluster-name {cluster} --addon-name <name> --addon-version <version>)",
    ]
    if settings.eks.upgrade_policy == "STANDARD" and versions.support_status(step.before) != "standard":
        lines.append(f"     r4a. {step.before} is past standard support: EKS rolls back to it only under EXTENDED; set eks.upgrade_policy "
                     f"'EXTENDED' and deploy, or: aws eks update-cluster-config --region {region} --name {cluster} "
                     "--upgrade-policy supportType=EXTENDED")
    lines += [
        f"     r4. the control plane: aws eks update-cluster-version --region {region} --name {cluster} --kubernetes-version {step.before}",
        f"     r5. until its update (type VersionRollback) is Successful: aws eks describe-update --region {region} --name {cluster} --update-id <id>",
        f"     r6. cdk.json, environments.{settings.env_name}: eks.version back to \"{step.before}\" and the add-on pins of r3, so the "
        "next deploy matches the cluster instead of upgrading it again; then validate and review",
    ]
    return lines


def cdk_json_change(settings: Settings, step: Step) -> dict:
    """The patch to environments.<env> for the step: the version and every known add-on pin
    (an unpinned add-on keeps its create-time version through a cluster upgrade: CloudFormation
    sees no change to it)."""
    patch: dict = {"eks": {"version": step.after}}
    for s in step.addons:
        if s.version is None:
            continue
        node = patch
        for part in s.addon.path.split("."):
            node = node.setdefault(part, {})
        node["version"] = s.version
    return patch


def pending_migration(settings: Settings, source) -> tuple[str, str] | None:
    """(running, pinned) where the task governance pin in config is past the Kueue CRD migration
    and the deployed add-on is before it: the next deploy's UpdateAddon fails, at any
    Kubernetes version, until the CRDs are migrated (what preflight fails on, said here too)."""
    addon = next((a for a in addons_of(settings) if a.name == TASK_GOVERNANCE and a.pinned), None)
    if addon is None:
        return None
    running = source.deployed(settings, addon)
    return (running, addon.pinned) if versions.crosses_task_governance_migration(running, addon.pinned) else None


def _migration_lines(head: str, to: str, deploy: str) -> list[str]:
    """The way across the Kueue CRD migration, the page's manual steps around the deploy."""
    return [
        f"  2. {head}: the task governance add-on goes to {to}, past {versions.TASK_GOVERNANCE_CRD_MIGRATION}, whose Kueue CRDs "
        f"drop v1alpha1 ({versions.TASK_GOVERNANCE_UPGRADE_PAGE}). The page recommends the HyperPod console's upgrade option, "
        "which migrates the CRDs itself, then deploy with the pin (the quick setup's task-governance-addon-migration-template.yaml "
        "automates the same); by hand, which deletes and re-creates every Kueue object from a backup:",
        f"     a. {versions.TASK_GOVERNANCE_MIGRATION_STEPS[0]}",
        f"     b. {versions.TASK_GOVERNANCE_MIGRATION_STEPS[1]}",
        f"     c. deploy, which updates the add-on: {deploy}",
        *(f"     {chr(ord('d') + i)}. {line}" for i, line in enumerate(versions.TASK_GOVERNANCE_MIGRATION_STEPS[3:])),
    ]


def fleet_guard_lines(fleet: list[Settings]) -> list[str]:
    """guard_lines of several environments: what it is said once, then each environment's commands."""
    out = guard_lines(fleet[0])[:1] if fleet else []
    for settings in fleet:
        out += [f"  {settings.env_name}:", *(f"  {line}" for line in guard_lines(settings)[1:])]
    return out


def to_text(settings: Settings, current: str, target: str, steps: list[Step], source_name: str,
            pending: tuple[str, str] | None = None, guard: bool = True) -> str:
    env = settings.env_name
    deploy = f"hyperpod-cdk validate -c env={env} && hyperpod-cdk review --env {env} && cdk deploy --all -c env={env}"
    first = []
    if pending:
        first = [f"before anything else: task governance runs {pending[0]} and config pins {pending[1]}; the next deploy's "
                 "UpdateAddon fails until the Kueue CRDs are migrated", *_migration_lines("MIGRATE FIRST", pending[1], deploy), ""]
    if not steps:
        # Offline it is the config that says the version, not the cluster.
        there = (f"the config asks for Kubernetes {current} already" if source_name == OFFLINE_SOURCE
                 else f"the cluster already runs Kubernetes {current}")
        return "\n".join([*first, f"{env}: {there}; nothing {'else ' if first else ''}to do",
                           *(["", *guard_lines(settings)] if guard else [])]) + "\n"
    out = [
        *first,
        f"upgrade plan for {env}: Kubernetes {current} -> {target}, {len(steps)} step{'s' if len(steps) > 1 else ''} "
        f"(one minor version each); add-on versions from {source_name}",
        "",
    ]
    # What each add-on ran before the first step: its pin (None: EKS's default, known to the account only).
    previous = {a.name: a.pinned for a in addons_of(settings)}
    for n, step in enumerate(steps, 1):
        out.append(f"step {n}: {step.before} -> {step.after}")
        out += [f"  warning: {w}" for w in step.warnings]
        out.append(f"  add-ons for {step.after}:")
        width = max(len(s.addon.name) for s in step.addons)
        for s in step.addons:
            out.append(f"    {s.addon.name:<{width}}  {s.version or '?':<22}  {s.source}")
        if step.insights is None:
            out.append(f"  before it: EKS's upgrade insights for {step.after} (deprecated APIs in use, version skew), once "
                       f"the cluster runs {step.before}:")
            out.append(f"       aws eks list-insights --region {settings.region} --cluster-name {settings.eks_cluster_name} "
                       f"--filter '{json.dumps({'categories': ['UPGRADE_READINESS'], 'kubernetesVersions': [step.after]}, separators=(',', ':'))}'")
        elif step.insights:
            out += [f"  RESOLVE FIRST, EKS upgrade insight {line}" for line in step.insights]
        else:
            out.append(f"  EKS upgrade insights for {step.after}: all passing")
        if settings.uses_existing_cluster:
            # The deploy only checks eks.version against the cluster it joins; it cannot move a control plane it does not own.
            owners = owners_addons(settings)
            out.append(f"  0. the control plane is not this project's (eks.existing_cluster): its owner upgrades it to {step.after}, "
                       f"and its own add-ons ({', '.join(owners)}) to versions for {step.after}, first:")
            out.append(f"       aws eks update-cluster-version --region {settings.region} --name {settings.eks_cluster_name} "
                       f"--kubernetes-version {step.after}")
        out.append(f"  1. cdk.json, environments.{env}: merge")
        out.append("       " + json.dumps(cdk_json_change(settings, step), separators=(", ", ": ")))
        unknown = [s.addon.name for s in step.addons if s.version is None]
        if unknown:
            out.append(f"     and pin {', '.join(unknown)} to the versions the account lists for {step.after}")
        out += [f"     LEFT BEHIND (validate refuses it at {step.after}): {line}" for line in step.left_behind]
        what = ("the add-ons and chart this project installs" if settings.uses_existing_cluster
                else "the control plane first, then the add-ons, in the stacks' order")
        if step.migration is not False:
            head = "MIGRATE FIRST" if step.migration else "IF task governance is at v1.3.x, MIGRATE FIRST"
            out += _migration_lines(head, step.migration_to or "a version for " + step.after, deploy)
            if step.migration is None:  # whether it crosses is the cluster's to say: the step deploys either way
                out.append(f"     otherwise (v1.5 or later already), deploy ({what}): {deploy}")
        else:
            out.append(f"  2. deploy ({what}): {deploy}")
        out.append(f"  3. the HyperPod AMI for {step.after}, group by group (UpdateClusterSoftware, which re-runs the lifecycle scripts):")
        out += [f"     {line}" for line in ami_lines(settings, step.after)]
        out += rollback_lines(settings, step, previous)
        previous = {s.addon.name: s.version for s in step.addons}
        out.append("")
    out += guard_lines(settings) if guard else []
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ pins for the version the cluster runs


def pins(settings: Settings, source, kubernetes: str) -> list[AddonStep]:
    """Each add-on a deploy installs that config leaves unpinned: the version the cluster runs
    where it runs one (pinning it changes nothing), else the one `source` gives for the
    cluster's Kubernetes version (None where it knows none)."""
    out = []
    for addon in (a for a in addons_of(settings) if not a.pinned):
        running = source.deployed(settings, addon)
        out.append(AddonStep(addon, running, "DescribeAddon, the version the cluster runs") if running
                   else AddonStep(addon, *source.version_for(addon, kubernetes)))
    return out


def written_pins(settings: Settings, source, target: str, cdk_json) -> str:
    """`upgrade-plan --to <the cluster's version> --write-pins`: write_pins of what pins() finds."""
    current = source.current(settings)
    if target != current:
        raise Refused(f"--write-pins: pins are for the version the cluster runs ({current}), not --to {target}; upgrade first")
    return write_pins(settings, cdk_json, pins(settings, source, current))


def write_pins(settings: Settings, cdk_json, found: list[AddonStep]) -> str:
    """Merge the known versions of `found` into cdk.json's environments.<env> (a change the
    review then shows); what was written and what is still unknown, one line each."""
    from infra.config import deep_merge

    patch = cdk_json_change(settings, Step(settings.eks.version, settings.eks.version, found))
    del patch["eks"]["version"]
    patch = {k: v for k, v in patch.items() if v}
    doc = json.loads(cdk_json.read_text())
    envs = doc["context"]["environments"]
    envs[settings.env_name] = deep_merge(envs.get(settings.env_name, {}), patch)
    cdk_json.write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"{s.addon.path}.version = {s.version}  ({s.source})" for s in found if s.version]
    lines += [f"{s.addon.path}: not pinned: {s.source}" for s in found if not s.version]
    head = f"{cdk_json}: environments.{settings.env_name} pins {sum(1 for s in found if s.version)} add-on(s) for Kubernetes {settings.eks.version}"
    return "\n".join([head if found else f"{settings.env_name}: every add-on is pinned already", *lines]) + "\n"


def run(settings: Settings, target: str, source, *, write: bool = False, cdk_json=None, guard: bool = True) -> str:
    """What `upgrade-plan` prints for one environment: its plan, or with --write-pins the pins it wrote."""
    if write:  # what config leaves to EKS's default of the day, pinned for the version the cluster runs
        return written_pins(settings, source, target, cdk_json)
    current, steps = build(settings, target, source)
    return to_text(settings, current, target, steps, source.name, pending_migration(settings, source), guard=guard)
