"""Drift: the deployed cluster against config. Karpenter, node recovery, auto-patching and hands
on the console change a cluster outside its templates. Each line says whether the difference
is expected (pass, with why), one to look at (warn), or one that makes the next deploy fail
(fail)."""

from __future__ import annotations

from cli.preflight.base import Clients, Result, error_code
from infra.handlers import hyperpod_nodes
from infra.config import Settings

DRIFT = "drift"
# DescribeCluster's ClusterImageVersionStatus (botocore's SageMaker model): what each says.
IMAGE_STATUS = {
    "UpToDate": ("pass", "on the newest HyperPod AMI release"),
    "UpdateAvailable": ("warn", "a newer HyperPod AMI release is available"),
    "SecurityUpdateRequired": ("warn", "a security update of the HyperPod AMI is required"),
    "EndOfLife": ("fail", "its HyperPod AMI release has reached end of life"),
}


# A node MoveClusterNodes takes from one group to another: moving, not failing (the gate's own words).
MOVING = hyperpod_nodes.MOVING


def _drift(check: str, status: str, detail: str, action: str = "") -> Result:
    return Result(f"drift {check}", status, detail, action, section=DRIFT)


def _deployed(settings: Settings, aws: Clients) -> dict | None:
    """DescribeCluster of the environment's HyperPod cluster (asked once), None when there is none."""
    key = ("deployed", settings.hyperpod_cluster_name)
    if key not in aws.cache:
        try:
            aws.cache[key] = aws("sagemaker").describe_cluster(ClusterName=settings.hyperpod_cluster_name)
        except Exception as err:  # noqa: BLE001 - boto3 error classes are per client
            if error_code(err) not in ("ResourceNotFound", "ValidationException"):
                raise
            aws.cache[key] = None
    return aws.cache[key]


def _nodes(settings: Settings, aws: Clients) -> list[dict]:
    key = ("nodes", settings.hyperpod_cluster_name)
    if key not in aws.cache:
        pages = aws("sagemaker").get_paginator("list_cluster_nodes").paginate(ClusterName=settings.hyperpod_cluster_name)
        aws.cache[key] = [n for page in pages for n in page["ClusterNodeSummaries"]]
    return aws.cache[key]


def check_drift_nodes(settings: Settings, aws: Clients) -> list[Result]:
    """Node counts per instance group: config's count, the cluster's target, and the nodes it lists."""
    cluster = _deployed(settings, aws)
    if cluster is None:
        return [_drift("cluster", "pass", f"no HyperPod cluster {settings.hyperpod_cluster_name} deployed yet: nothing to compare")]
    deployed = {g["InstanceGroupName"]: g for g in cluster.get("InstanceGroups", [])}
    listed: dict[str, int] = {}
    states: dict[str, dict[str, int]] = {}  # group -> node status other than Running -> nodes
    for node in _nodes(settings, aws):
        group = node["InstanceGroupName"]
        listed[group] = listed.get(group, 0) + 1
        status = node.get("InstanceStatus", {}).get("Status", "Running")
        if status != "Running":
            states.setdefault(group, {})[status] = states.setdefault(group, {}).get(status, 0) + 1
    results = []
    for group in settings.hyperpod.instance_groups:
        check = f"{group.name} nodes"
        live = deployed.get(group.name)
        if live is None:
            results.append(_drift(check, "warn", "in config, not in the deployed cluster", "the next deploy adds it"))
            continue
        target, nodes = live.get("TargetCount", live.get("CurrentCount", 0)), listed.get(group.name, 0)
        if group.autoscaled:
            ceiling = group.max_count or 0
            results.append(
                _drift(check, "pass", f"{nodes} node(s), Karpenter-scaled from 0 to {ceiling} (expected to differ from count)")
                if nodes <= ceiling
                else _drift(check, "warn", f"{nodes} node(s), above max_count {ceiling}", "check the NodePool's limits")
            )
        elif target != group.count:
            moving = states.get(group.name, {}).keys() & set(MOVING)
            how = "nodes are moving in or out (MoveClusterNodes)" if moving else "changed outside the templates (a scaling, or MoveClusterNodes)"
            results.append(_drift(check, "warn", f"target {target}, config says {group.count}: {how}",
                                  f"put {target} in config to keep it; a deploy that updates the instance groups sets it back to {group.count}"))
        elif states.get(group.name, {}).keys() & set(MOVING) and nodes != target:
            results.append(_drift(check, "warn", f"{nodes} node(s), target {target}: nodes are moving (MoveClusterNodes), which changes "
                                  "the groups' counts outside CloudFormation",
                                  f"once the move is done, put the counts it leaves in config; a deploy sets {group.name} back to {group.count}"))
        elif nodes < target:
            floor = group.min_count if group.min_count is not None else target
            why = ("expected while HyperPod provisions or replaces nodes (continuous provisioning, node recovery)"
                   if nodes >= floor and settings.hyperpod.continuous else "fewer nodes than the target")
            status = "pass" if nodes >= floor and settings.hyperpod.continuous else "warn"
            results.append(_drift(check, status, f"{nodes} of {target} node(s): {why}",
                                  "look at the group's nodes: aws sagemaker list-cluster-nodes --cluster-name "
                                  f"{settings.hyperpod_cluster_name}"))
        else:
            results.append(_drift(check, "pass", f"{nodes} of {target} node(s), as config says"))
        if states.get(group.name):
            # ClusterInstanceStatus: Pending, DeepHealthCheckInProgress, SystemUpdating are passing states, and a node
            # Detach/AttachInProgress is moving between groups (MOVING); Failure is not.
            shown = ", ".join(f"{n} {s}" + (" (moving: MoveClusterNodes)" if s in MOVING else "") for s, n in sorted(states[group.name].items()))
            last = results[-1]
            status = "warn" if "Failure" in states[group.name] and last.status == "pass" else last.status
            results[-1] = Result(last.check, status, f"{last.detail}; not Running: {shown}", last.action, last.section)
    for name in sorted(set(deployed) - {g.name for g in settings.hyperpod.instance_groups}):
        results.append(_drift(f"{name} nodes", "warn", "deployed, not in config: added outside the templates",
                              "add it to hyperpod.instance_groups to keep it, or remove it: aws sagemaker update-cluster "
                              f"--cluster-name {settings.hyperpod_cluster_name} --instance-groups-to-delete {name}"))
    return results


def check_drift_operations(settings: Settings, aws: Clients) -> list[Result]:
    """The cluster's operations in progress (ListClusterOperations, DescribeClusterOperation): a scaling or a
    deep health check HyperPod runs as one handle, which a deploy now would compete with."""
    if _deployed(settings, aws) is None:
        return []
    sagemaker, name, results = aws("sagemaker"), settings.hyperpod_cluster_name, []
    for page in sagemaker.get_paginator("list_cluster_operations").paginate(ClusterName=name, Status="InProgress"):
        for op in page.get("ClusterOperationSummaries", []):
            found = sagemaker.describe_cluster_operation(ClusterName=name, OperationId=op["OperationId"])
            if found.get("Type") == "Scaling":
                parts = [f"{d.get('InstanceGroupName')} {d.get('Original', {}).get('TargetCount', '?')} -> "
                         f"{d.get('Desired', {}).get('TargetCount', '?')}" for d in found.get("ScalingDetails", [])]
                what = f"a scaling in progress ({', '.join(parts) or 'no group named'})"
            else:
                parts = [f"{len(d.get('InstanceIds', []))} node(s) of {d.get('InstanceGroupName')}" for d in found.get("DeepHealthCheckDetails", [])]
                what = f"a deep health check in progress on {', '.join(parts) or 'the cluster'}: those nodes stay Unschedulable until it passes"
            results.append(_drift(f"operation {op['OperationId']}", "warn", what,
                                  "let it finish before a deploy that changes the instance groups: aws sagemaker describe-cluster-operation "
                                  f"--cluster-name {name} --operation-id {op['OperationId']}"))
    return results or [_drift("operations", "pass", "no scaling or deep health check in progress")]


def check_drift_images(settings: Settings, aws: Clients) -> list[Result]:
    """Each group's HyperPod AMI: its image version status, and its release against a pin."""
    cluster = _deployed(settings, aws)
    if cluster is None:
        return []
    groups = {g.name: g for g in settings.hyperpod.instance_groups}
    results = []
    for live in cluster.get("InstanceGroups", []):
        name, group = live["InstanceGroupName"], groups.get(live["InstanceGroupName"])
        status = live.get("ImageVersionStatus")
        current = live.get("CurrentImageReleaseVersion") or live.get("CurrentImageId") or "unknown"
        behind = sum(n.get("ImageVersionStatus", "UpToDate") != "UpToDate" for n in _nodes(settings, aws) if n["InstanceGroupName"] == name)
        level, words = IMAGE_STATUS.get(status, ("warn", f"image version status {status or 'not reported'}"))
        rolling = group is not None and (group.auto_patch or group.scheduled_update)
        if level == "warn" and rolling:
            level, words = "pass", f"{words} (expected: {'auto_patch' if group.auto_patch else 'scheduled_update'} rolls it)"
        detail = f"release {current}: {words}" + (f"; {behind} node(s) behind" if behind else "")
        action = "" if level == "pass" else f"hyperpod-cdk upgrade-plan, or aws sagemaker update-cluster-software --cluster-name {settings.hyperpod_cluster_name}"
        results.append(_drift(f"{name} AMI", level, detail, action))
        pinned = group.image_release_version if group else None
        if pinned and live.get("CurrentImageReleaseVersion") not in (None, pinned):
            # The schema: auto-patching and out-of-band updates advance a group past its pin,
            # and CloudFormation does not revert them.
            expected = bool(group.auto_patch)
            results.append(_drift(
                f"{name} AMI pin", "pass" if expected else "warn",
                f"runs {live['CurrentImageReleaseVersion']}, config pins {pinned}"
                + (" (expected: auto_patch moves it past the pin)" if expected else ": updated outside the templates"),
                "" if expected else f"set image_release_version to {live['CurrentImageReleaseVersion']} to record it",
            ))
    return results


def check_drift_addons(settings: Settings, aws: Clients) -> list[Result]:
    """Each EKS add-on's deployed version against its pin. EKS cannot move an add-on back to an
    older version, so a pin below what runs makes the next deploy's UpdateAddon fail."""
    from cli.upgrade_plan import TASK_GOVERNANCE, _version_key, addons_of
    from infra import versions

    if _deployed(settings, aws) is None:
        return []
    eks, results = aws("eks"), []
    for addon in addons_of(settings):
        check = f"add-on {addon.name}"
        try:
            running = eks.describe_addon(clusterName=settings.eks_cluster_name, addonName=addon.name)["addon"]["addonVersion"]
        except Exception as err:  # noqa: BLE001
            if error_code(err) != "ResourceNotFoundException":
                raise
            pin = f" --addon-version {addon.pinned}" if addon.pinned else ""
            results.append(_drift(check, "warn", "not installed: removed outside the templates, or not deployed yet",
                                  "a first deploy installs it; if it was removed, CloudFormation still counts it created: aws eks "
                                  f"create-addon --cluster-name {settings.eks_cluster_name} --addon-name {addon.name}{pin}"))
            continue
        if addon.pinned is None:
            results.append(_drift(check, "pass", f"{running} (not pinned: EKS's choice at create, kept since)"))
        elif running == addon.pinned:
            results.append(_drift(check, "pass", f"{running}, as pinned"))
        elif _version_key(running) > _version_key(addon.pinned):
            results.append(_drift(check, "fail", f"runs {running}, newer than the pin {addon.pinned}: updated outside the templates",
                                  f"pin {addon.path}.version to {running}; EKS cannot move an add-on back"))
        elif versions.crosses_task_governance_migration(running, addon.pinned) and addon.name == TASK_GOVERNANCE:
            # UpdateAddon fails on the Kueue CRDs' stored versions (the upgrade page's error).
            results.append(_drift(check, "fail", f"runs {running}, pinned {addon.pinned}: the update crosses the Kueue CRD storage-version "
                                  f"migration at {versions.TASK_GOVERNANCE_CRD_MIGRATION}, and UpdateAddon fails without it",
                                  f"migrate first, then deploy: {versions.TASK_GOVERNANCE_MIGRATION_WAYS}"))
        else:
            results.append(_drift(check, "warn", f"runs {running}, pinned {addon.pinned}", "the next deploy updates it to the pin"))
    return results


def check_drift_chart(settings: Settings, aws: Clients) -> list[Result]:
    """The dependencies chart revision the last deploy recorded against the one config pins."""
    from infra.naming import CHART_REVISION_OUTPUT

    if _deployed(settings, aws) is None:
        return []
    pinned, stack = settings.hyperpod.helm_chart.revision, settings.stack_name("hyperpod")
    try:
        outputs = aws("cloudformation").describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    except Exception as err:  # noqa: BLE001
        if error_code(err) != "ValidationError":
            raise
        return [_drift("chart", "warn", f"no stack {stack}: the cluster was not deployed by this project", "")]
    recorded = next((o["OutputValue"] for o in outputs if o["OutputKey"] == CHART_REVISION_OUTPUT), None)
    if recorded is None:
        return [_drift("chart", "warn", f"{stack} records no chart revision (deployed before it did)", "the next deploy records it")]
    if recorded == pinned:
        return [_drift("chart", "pass", f"revision {pinned[:12]}, as pinned")]
    return [_drift("chart", "pass", f"deployed {recorded[:12]}, config pins {pinned[:12]} (expected after a pin change: "
                   "the next deploy installs it)")]
