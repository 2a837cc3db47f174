"""Read-only checks against the real account, so a deploy does not fail 40 minutes in.

Every call here is a Describe/Get/List. Each check returns pass, warn or fail with what
to do about it; `hyperpod-cdk preflight` exits non-zero when any fails.
"""

from __future__ import annotations

import os

from dataclasses import dataclass

from infra import identity
from infra.config import Settings
from cli.exposure import quota_name

CDK_TOOLKIT_STACK = "CDKToolkit"
STACK_TAG = "aws:cloudformation:stack-name"


@dataclass(frozen=True)
class Result:
    check: str
    status: str  # pass | warn | fail
    detail: str
    action: str = ""
    section: str = ""  # "drift": the deployed cluster against config


class Clients:
    """One boto3 client per service, from a session; tests may hand in stubbed ones."""

    def __init__(self, session, region: str, overrides: dict | None = None):
        self.session, self.region = session, region
        self.cache = dict(overrides or {})

    def __call__(self, service: str):
        if service not in self.cache:
            self.cache[service] = self.session.client(service, region_name=self.region)
        return self.cache[service]


def _error_code(err) -> str:
    return getattr(err, "response", {}).get("Error", {}).get("Code", type(err).__name__)


def check_account(settings: Settings, aws: Clients) -> list[Result]:
    account = aws("sts").get_caller_identity()["Account"]
    if account == settings.account:
        return [Result("account", "pass", f"credentials are for {account}")]
    return [
        Result(
            "account",
            "fail",
            f"credentials are for {account}, config says {settings.account}",
            f"use credentials for {settings.account}, or set `account` for env {settings.env_name}",
        )
    ]


def check_zones(settings: Settings, aws: Clients) -> list[Result]:
    zones = {z["ZoneName"]: z["ZoneId"] for z in aws("ec2").describe_availability_zones(AllAvailabilityZones=False)["AvailabilityZones"]}
    results = []
    expected = dict(zip(settings.availability_zones, settings.availability_zone_ids or ()))
    for az in settings.availability_zones:
        if az not in zones:
            results.append(Result(f"zone {az}", "fail", f"not offered in {aws.region}", f"pick zones from: {', '.join(sorted(zones))}"))
        elif az in expected and zones[az] != expected[az]:
            results.append(
                Result(
                    f"zone {az}",
                    "fail",
                    f"is {zones[az]} in this account, config expects {expected[az]}",
                    f"use the zone name that maps to {expected[az]} (zone names differ per account)",
                )
            )
        elif az in expected:
            results.append(Result(f"zone {az}", "pass", f"is {zones[az]} as expected"))
        else:
            results.append(
                Result(f"zone {az}", "warn", f"is {zones[az]} in this account", "pin it in availability_zone_ids to catch a remapped account")
            )
    return results


def _quotas(aws: Clients) -> dict[str, float]:
    by_name = {}
    for page in aws("service-quotas").get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
        for quota in page["Quotas"]:
            by_name[quota["QuotaName"]] = quota["Value"]
    return by_name


def check_quotas(settings: Settings, aws: Clients) -> list[Result]:
    """The quota "<type> for cluster usage" covers the sum over instance groups, per type."""
    quotas = _quotas(aws)
    results = []
    for itype, needed in sorted(settings.capacity().items()):
        name = quota_name(itype)
        if name not in quotas:
            results.append(Result(f"quota {itype}", "warn", f"no SageMaker quota named '{name}' found", "check Service Quotas > Amazon SageMaker"))
        elif quotas[name] < needed:
            results.append(
                Result(
                    f"quota {itype}",
                    "fail",
                    f"'{name}' is {quotas[name]:g}, instance groups need {needed}",
                    f"request an increase of '{name}' to {needed} in Service Quotas (ResourceLimitExceeded otherwise)",
                )
            )
        else:
            results.append(Result(f"quota {itype}", "pass", f"'{name}' is {quotas[name]:g}, need {needed}"))
    return results


def check_eks_name(settings: Settings, aws: Clients) -> list[Result]:
    if settings.uses_existing_cluster:
        return []  # it must exist: check_existing_cluster
    name, ours = settings.eks_cluster_name, settings.stack_name("cluster")
    try:
        cluster = aws("eks").describe_cluster(name=name)["cluster"]
    except Exception as err:  # noqa: BLE001 - boto3 error classes are per client
        if _error_code(err) == "ResourceNotFoundException":
            return [Result("EKS name", "pass", f"no EKS cluster named {name}")]
        raise
    owner = cluster.get("tags", {}).get(STACK_TAG)
    if owner == ours:
        return [Result("EKS name", "pass", f"{name} exists and belongs to {ours} (an update)")]
    return [Result("EKS name", "fail", f"an EKS cluster {name} exists (stack: {owner or 'none'})", "set eks.cluster_name, or delete the other cluster")]


def check_hyperpod_name(settings: Settings, aws: Clients) -> list[Result]:
    name, ours = settings.hyperpod_cluster_name, settings.stack_name("hyperpod")
    sagemaker = aws("sagemaker")
    try:
        arn = sagemaker.describe_cluster(ClusterName=name)["ClusterArn"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) in ("ResourceNotFound", "ValidationException"):
            return [Result("HyperPod name", "pass", f"no HyperPod cluster named {name}")]
        raise
    tags = {t["Key"]: t["Value"] for t in sagemaker.list_tags(ResourceArn=arn).get("Tags", [])}
    if tags.get(STACK_TAG) == ours:
        return [Result("HyperPod name", "pass", f"{name} exists and belongs to {ours} (an update)")]
    return [
        Result("HyperPod name", "fail", f"a HyperPod cluster {name} exists (stack: {tags.get(STACK_TAG, 'none')})", "set hyperpod.cluster_name")
    ]


def check_eks_version(settings: Settings, aws: Clients) -> list[Result]:
    version = settings.eks.version
    offered = aws("eks").describe_cluster_versions(clusterVersions=[version]).get("clusterVersions", [])
    if not offered:
        return [Result("EKS version", "fail", f"{version} is not offered in {aws.region}", "choose an offered eks.version")]
    status = offered[0].get("versionStatus", offered[0].get("status", "UNKNOWN"))
    if status in ("STANDARD_SUPPORT", "standard-support"):
        return [Result("EKS version", "pass", f"{version} is in standard support")]
    return [Result("EKS version", "warn", f"{version} is offered ({status})", "extended support costs extra per cluster-hour")]


def _addons_to_create(settings: Settings) -> dict[str, str | None]:
    """EKS add-on name -> pinned version (None: EKS's default) of every add-on a deploy creates."""
    from cli.upgrade_plan import addons_of

    return {addon.name: addon.pinned for addon in addons_of(settings)}


def check_addon_versions(settings: Settings, aws: Clients) -> list[Result]:
    """An add-on with no version for the cluster's Kubernetes version fails CreateAddon."""
    version, results = settings.eks.version, []
    for name, pinned in _addons_to_create(settings).items():
        found = aws("eks").describe_addon_versions(kubernetesVersion=version, addonName=name).get("addons", [])
        offered = [v["addonVersion"] for a in found for v in a.get("addonVersions", [])]
        if not offered:
            results.append(
                Result(f"add-on {name}", "fail", f"publishes no version for Kubernetes {version} in {aws.region}", "choose an eks.version it supports, or turn it off")
            )
        elif pinned and pinned not in offered:
            results.append(
                Result(f"add-on {name}", "fail", f"{pinned} is not offered for Kubernetes {version}", f"pin one of: {', '.join(offered[:5])}")
            )
        else:
            results.append(Result(f"add-on {name}", "pass", f"{pinned or offered[0]} for Kubernetes {version}"))
    return results


def check_admins(settings: Settings, aws: Clients) -> list[Result]:
    iam = aws("iam")
    results = []
    if not settings.eks.admin_principal_arns and settings.uses_existing_cluster:
        return [Result("admin principals", "pass", f"none to add: access to {settings.eks_cluster_name} stays as it is")]
    if not settings.eks.admin_principal_arns:
        return [Result("admin principals", "warn", "eks.admin_principal_arns is empty", "add your role, or nobody can use kubectl")]
    for arn in settings.eks.admin_principal_arns:
        principal = identity.parse(arn, ("role", "user"))  # validated; Get* take the name without its path
        kind, name = principal.kind, principal.name
        try:
            iam.get_role(RoleName=name) if kind == "role" else iam.get_user(UserName=name)
            results.append(Result(f"admin {name}", "pass", f"{kind} exists"))
        except Exception as err:  # noqa: BLE001
            if _error_code(err) != "NoSuchEntity":
                raise
            results.append(Result(f"admin {name}", "fail", f"{arn} does not exist", "fix eks.admin_principal_arns"))
    return results


def check_bootstrap(settings: Settings, aws: Clients) -> list[Result]:
    try:
        stack = aws("cloudformation").describe_stacks(StackName=CDK_TOOLKIT_STACK)["Stacks"][0]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) != "ValidationError":
            raise
        return [
            Result("CDK bootstrap", "fail", f"no {CDK_TOOLKIT_STACK} stack in {aws.region}", f"cdk bootstrap aws://{settings.account}/{aws.region}")
        ]
    if stack["StackStatus"].endswith("_COMPLETE") and "ROLLBACK" not in stack["StackStatus"]:
        return [Result("CDK bootstrap", "pass", f"{CDK_TOOLKIT_STACK} is {stack['StackStatus']}")]
    return [Result("CDK bootstrap", "fail", f"{CDK_TOOLKIT_STACK} is {stack['StackStatus']}", "re-run cdk bootstrap")]


def retained_names(settings: Settings) -> list[tuple[str, str, str]]:
    """(kind, name, stack) of each kept resource whose name config fixes: what an earlier
    deploy of this environment may have left behind after `cdk destroy`."""
    # An existing lifecycle bucket is not ours to keep: check_existing_lifecycle_bucket.
    out = [] if settings.hyperpod.existing_lifecycle_bucket else [("bucket", settings.lifecycle_bucket_name, settings.stack_name("cluster"))]
    if not settings.uses_existing_cluster:  # an existing cluster's log group is its own
        out.append(("log group", f"/aws/eks/{settings.eks_cluster_name}/cluster", settings.stack_name("cluster")))
    if settings.network.flow_logs:
        out.append(("log group", f"/{settings.prefix}/{settings.env_name}/vpc-flow-logs", settings.stack_name("network")))
    if settings.sample_job.enabled and settings.sample_job.checkpoint_to == "s3":
        out.append(("bucket", settings.checkpoint_bucket_name, settings.stack_name("sample-job")))
    return out


def check_retained_names(settings: Settings, aws: Clients) -> list[Result]:
    """A kept bucket or log group outside any stack makes the next create fail ("already exists")."""
    if not settings.protection.retain_data:
        return []
    results = []
    for kind, name, stack in retained_names(settings):
        if kind == "bucket":
            try:
                aws("s3").head_bucket(Bucket=name)
                exists = True
            except Exception as err:  # noqa: BLE001
                if _error_code(err) not in ("404", "NoSuchBucket", "NotFound"):
                    raise
                exists = False
        else:
            groups = aws("logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
            exists = any(g["logGroupName"] == name for g in groups)
        if not exists:
            results.append(Result(f"{kind} {name}", "pass", "name is free"))
        elif _stack_exists(aws, stack):
            results.append(Result(f"{kind} {name}", "pass", f"belongs to {stack}"))
        else:
            results.append(
                Result(
                    f"{kind} {name}",
                    "fail",
                    f"exists, kept by an earlier {stack}: creating it again fails",
                    f"deploy with --import-existing-resources to adopt it (cdk deploy --all -c env={settings.env_name} --import-existing-resources)",
                )
            )
    return results


def _stack_exists(aws: Clients, name: str) -> bool:
    try:
        status = aws("cloudformation").describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) != "ValidationError":
            raise
        return False
    return status != "DELETE_COMPLETE"


def check_named_resources(settings: Settings, aws: Clients) -> list[Result]:
    """What config names but no stack creates: custom AMIs and rollback alarms of instance groups."""
    results = []
    for group in settings.hyperpod.instance_groups:
        if group.image_id:
            images = aws("ec2").describe_images(Filters=[{"Name": "image-id", "Values": [group.image_id]}])["Images"]
            results.append(
                Result(f"AMI {group.image_id}", "pass", f"exists (group {group.name})")
                if images
                else Result(f"AMI {group.image_id}", "fail", f"group {group.name}'s image_id is not an AMI this account can use in {aws.region}",
                            "build it from the HyperPod AMI or drop image_id")
            )
        alarms = list(group.scheduled_update.rollback_alarms) if group.scheduled_update else []
        if alarms:
            found = {a["AlarmName"] for a in aws("cloudwatch").describe_alarms(AlarmNames=alarms)["MetricAlarms"]}
            for alarm in alarms:
                results.append(
                    Result(f"alarm {alarm}", "pass", f"exists (group {group.name})")
                    if alarm in found
                    else Result(f"alarm {alarm}", "fail", f"group {group.name}'s rollback alarm does not exist in {aws.region}",
                                "create the CloudWatch alarm, or remove it from scheduled_update.rollback_alarms")
                )
    return results


def check_operations_topic(settings: Settings, aws: Clients) -> list[Result]:
    """An existing operations topic (operations.notifications.topic_arn) exists and its policy
    lets this config's publishers publish; the stack grants them only on a topic it creates."""
    import json

    from infra import alerting

    arn = settings.operations.notifications.topic_arn
    if not arn:
        return []
    name = f"topic {arn.rsplit(':', 1)[1]}"
    try:
        attrs = aws("sns").get_topic_attributes(TopicArn=arn)["Attributes"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) not in ("NotFound", "NotFoundException"):
            raise
        return [Result(name, "fail", f"{arn} does not exist", "create it, or fix operations.notifications.topic_arn")]
    admitted = set()
    for st in json.loads(attrs.get("Policy") or "{}").get("Statement", []):
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        services = st.get("Principal", {}).get("Service", []) if isinstance(st.get("Principal"), dict) else []
        services = [services] if isinstance(services, str) else services
        if st.get("Effect") == "Allow" and any(a.lower() in ("sns:publish", "sns:*") for a in actions):
            admitted |= set(services)
    missing = sorted(alerting.publishers(settings) - admitted)
    if missing:
        return [Result(name, "fail", f"its policy does not let {', '.join(missing)} publish",
                       "add an sns:Publish statement per service (README, Operations: an existing topic)")]
    key = attrs.get("KmsMasterKeyId")
    if key:
        return [Result(name, "warn", f"is encrypted with {key}",
                       f"its key policy must let {', '.join(sorted(alerting.publishers(settings)))} use kms:GenerateDataKey* and kms:Decrypt")]
    return [Result(name, "pass", f"exists; its policy admits {', '.join(sorted(alerting.publishers(settings)))}")]


def check_existing_vpc_endpoints(settings: Settings, aws: Clients) -> list[Result]:
    """An endpoint the existing VPC already has fails the one the network stack would add: a
    second S3 gateway on the same route table, or a second interface endpoint with private DNS
    ("private-dns-enabled cannot be set because there is already a conflicting DNS domain")."""
    ev = settings.network.existing_vpc
    if ev is None:
        return []
    have = aws("ec2").describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [ev.vpc_id]}])["VpcEndpoints"]
    prefix = f"com.amazonaws.{aws.region}."
    results = []
    if ev.s3_gateway_endpoint:
        ours = {*ev.private_subnet_route_table_ids, *(sn.route_table_id for sn in settings.network.hyperpod_subnets if sn.route_table_id)}
        taken = sorted({rt for e in have if e["ServiceName"] == prefix + "s3" and e.get("VpcEndpointType") == "Gateway"
                        for rt in e.get("RouteTableIds", []) if rt in ours})
        results.append(
            Result("endpoint s3", "fail", f"{ev.vpc_id} already has an S3 gateway endpoint on {', '.join(taken)}",
                   "set network.existing_vpc.s3_gateway_endpoint to false")
            if taken
            else Result("endpoint s3", "pass", "no S3 gateway endpoint on these route tables yet")
        )
    for service in settings.network.endpoint_services:
        clash = [e["VpcEndpointId"] for e in have if e["ServiceName"] == prefix + service and e.get("PrivateDnsEnabled")]
        results.append(
            Result(f"endpoint {service}", "fail", f"{ev.vpc_id} already has {', '.join(clash)} with private DNS; a second one fails",
                   f"list network.interface_endpoints without {service}")
            if clash
            else Result(f"endpoint {service}", "pass", "not in the VPC yet")
        )
    return results


def check_volume_key(settings: Settings, aws: Clients) -> list[Result]:
    """A key named in hyperpod.volume_encryption.kms_key_arn, as HyperPod's customer managed key
    page (smcluster-cmk) needs it: enabled, symmetric, and a key policy with no
    encryption-context condition (HyperPod passes none) that lets the execution role in, through
    the account's IAM policies (the stack grants the role on the key) or by name."""
    enc = settings.hyperpod.volume_encryption
    if enc is None or not enc.kms_key_arn:
        return []
    check, kms = "volume key", aws("kms")
    try:
        key = kms.describe_key(KeyId=enc.kms_key_arn)["KeyMetadata"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) not in ("NotFoundException", "AccessDeniedException"):
            raise
        return [Result(check, "fail", f"{enc.kms_key_arn} cannot be read here ({_error_code(err)})",
                       "create the key, or give one these credentials can describe")]
    if key.get("KeyState") != "Enabled" or key.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
        return [Result(check, "fail", f"{enc.kms_key_arn} is {key.get('KeyState')}, {key.get('KeySpec')}",
                       "EBS takes an enabled symmetric key (SYMMETRIC_DEFAULT)")]
    import json as _json

    policy = _json.loads(kms.get_key_policy(KeyId=enc.kms_key_arn, PolicyName="default")["Policy"])
    statements = policy.get("Statement", [])
    statements = statements if isinstance(statements, list) else [statements]
    if any("EncryptionContext" in _json.dumps(s.get("Condition", {})) for s in statements if s.get("Effect") == "Allow"):
        return [Result(check, "fail", "its key policy scopes a grant by encryption context, which HyperPod does not pass",
                       "drop the kms:EncryptionContext conditions (HyperPod's customer managed key page)")]
    root = f"arn:{key['Arn'].split(':')[1]}:iam::{settings.account}:root"

    def principals(s):
        aws_ = s.get("Principal", {}).get("AWS", []) if isinstance(s.get("Principal"), dict) else []
        return aws_ if isinstance(aws_, list) else [aws_]

    delegates = any(s.get("Effect") == "Allow" and (root in principals(s) or settings.account in principals(s))
                    and s.get("Action") in ("kms:*", ["kms:*"]) and not s.get("Condition") for s in statements)
    if delegates:
        return [Result(check, "pass", f"{key['KeyId']}: enabled, symmetric; its policy lets IAM policies grant it (the stack grants the execution role)")]
    return [Result(check, "warn", f"{key['KeyId']}: its policy does not let IAM policies grant it",
                   "let the execution role kms:CreateGrant (kms:GrantIsForAWSResource) and kms:DescribeKey via "
                   f"sagemaker.{settings.region}.amazonaws.com in the key policy, once the hyperpod stack has created the role")]


# ------------------------------------------------------------------ drift: the deployed cluster against config
# Karpenter, node recovery, auto-patching and hands on the console change a cluster outside its
# templates. Each line says whether the difference is expected (pass, with why), one to look at
# (warn), or one that makes the next deploy fail (fail).

DRIFT = "drift"
# DescribeCluster's ClusterImageVersionStatus (botocore's SageMaker model): what each says.
IMAGE_STATUS = {
    "UpToDate": ("pass", "on the newest HyperPod AMI release"),
    "UpdateAvailable": ("warn", "a newer HyperPod AMI release is available"),
    "SecurityUpdateRequired": ("warn", "a security update of the HyperPod AMI is required"),
    "EndOfLife": ("fail", "its HyperPod AMI release has reached end of life"),
}


def _drift(check: str, status: str, detail: str, action: str = "") -> Result:
    return Result(f"drift {check}", status, detail, action, section=DRIFT)


def _deployed(settings: Settings, aws: Clients) -> dict | None:
    """DescribeCluster of the environment's HyperPod cluster (asked once), None when there is none."""
    key = ("deployed", settings.hyperpod_cluster_name)
    if key not in aws.cache:
        try:
            aws.cache[key] = aws("sagemaker").describe_cluster(ClusterName=settings.hyperpod_cluster_name)
        except Exception as err:  # noqa: BLE001 - boto3 error classes are per client
            if _error_code(err) not in ("ResourceNotFound", "ValidationException"):
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
            results.append(_drift(check, "warn", f"target {target}, config says {group.count}: changed outside the templates",
                                  f"put {target} in config to keep it; a deploy that updates the instance groups sets it back to {group.count}"))
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
            # ClusterInstanceStatus: Pending, DeepHealthCheckInProgress, SystemUpdating are passing states; Failure is not.
            shown = ", ".join(f"{n} {s}" for s, n in sorted(states[group.name].items()))
            last = results[-1]
            status = "warn" if "Failure" in states[group.name] and last.status == "pass" else last.status
            results[-1] = Result(last.check, status, f"{last.detail}; not Running: {shown}", last.action, last.section)
    for name in sorted(set(deployed) - {g.name for g in settings.hyperpod.instance_groups}):
        results.append(_drift(f"{name} nodes", "warn", "deployed, not in config: added outside the templates",
                              "add it to hyperpod.instance_groups to keep it, or remove it: aws sagemaker update-cluster "
                              f"--cluster-name {settings.hyperpod_cluster_name} --instance-groups-to-delete {name}"))
    return results


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
            if _error_code(err) != "ResourceNotFoundException":
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
        if _error_code(err) != "ValidationError":
            raise
        return [_drift("chart", "warn", f"no stack {stack}: the cluster was not deployed by this project", "")]
    recorded = next((o["OutputValue"] for o in outputs if o["OutputKey"] == CHART_REVISION_OUTPUT), None)
    if recorded is None:
        return [_drift("chart", "warn", f"{stack} records no chart revision (deployed before it did)", "the next deploy records it")]
    if recorded == pinned:
        return [_drift("chart", "pass", f"revision {pinned[:12]}, as pinned")]
    return [_drift("chart", "pass", f"deployed {recorded[:12]}, config pins {pinned[:12]} (expected after a pin change: "
                   "the next deploy installs it)")]


def _semver(version: str) -> tuple[int, int, int] | None:
    import re

    found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(n) for n in found.groups()) if found else None


def check_existing_cluster(settings: Settings, aws: Clients) -> list[Result]:
    """eks.existing_cluster against HyperPod's EKS prerequisites, and against what the deploy
    will create on it: one line per requirement, each failure with what to do."""
    from addons import registry
    from addons.base import ManagedAddon
    from infra import versions

    ec = settings.eks.existing_cluster
    if ec is None:
        return []
    eks, name = aws("eks"), ec.name
    try:
        cluster = eks.describe_cluster(name=name)["cluster"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) != "ResourceNotFoundException":
            raise
        return [Result("EKS cluster", "fail", f"no EKS cluster named {name} in {aws.region}", "fix eks.existing_cluster.name (aws eks list-clusters)")]
    results = [
        Result("EKS cluster", "pass", f"{name} is {cluster.get('status', 'UNKNOWN')}")
        if cluster.get("status") == "ACTIVE"
        else Result("EKS cluster", "warn", f"{name} is {cluster.get('status', 'UNKNOWN')}", "deploy once it is ACTIVE")
    ]
    hyperpod = next(r for r in versions.COMPONENT_RANGES if r.component.startswith("SageMaker HyperPod"))
    running = cluster.get("version", "")
    if running != settings.eks.version:
        results.append(Result("EKS cluster version", "fail", f"{name} runs Kubernetes {running}, config says {settings.eks.version}",
                              f"set eks.version to \"{running}\": the kubectl layer and the add-on versions follow it"))
    elif not hyperpod.oldest <= versions.parse(running) <= hyperpod.newest:
        results.append(Result("EKS cluster version", "fail",
                              f"{running} is outside what HyperPod supports ({versions.fmt(hyperpod.oldest)}-{versions.fmt(hyperpod.newest)})",
                              f"upgrade {name} into that range ({hyperpod.source})"))
    else:
        results.append(Result("EKS cluster version", "pass", f"{running}, which HyperPod supports"))
    mode = cluster.get("accessConfig", {}).get("authenticationMode", "CONFIG_MAP")
    results.append(
        Result("EKS authentication mode", "pass", mode)
        if mode in ("API", "API_AND_CONFIG_MAP")
        else Result("EKS authentication mode", "fail", f"{mode}: HyperPod and access entries need API or API_AND_CONFIG_MAP",
                    f"aws eks update-cluster-config --name {name} --access-config authenticationMode=API_AND_CONFIG_MAP")
    )
    vpc_config, ev = cluster.get("resourcesVpcConfig", {}), settings.network.existing_vpc
    if ev is not None and vpc_config.get("vpcId") != ev.vpc_id:
        results.append(Result("EKS cluster VPC", "fail", f"{name} is in {vpc_config.get('vpcId')}, network.existing_vpc is {ev.vpc_id}",
                              "set network.existing_vpc to the cluster's VPC"))
    group = vpc_config.get("clusterSecurityGroupId")
    if group != ec.security_group_id:
        results.append(Result("EKS cluster security group", "fail", f"{name}'s cluster security group is {group}, config says {ec.security_group_id}",
                              f"set eks.existing_cluster.security_group_id to {group}"))
    installed = set(eks.list_addons(clusterName=name).get("addons", []))
    # VPC CNI: the only CNI HyperPod supports, at a minimum version.
    floor = ".".join(map(str, versions.VPC_CNI_MIN_FOR_HYPERPOD))
    if "vpc-cni" in installed:
        addon = eks.describe_addon(clusterName=name, addonName="vpc-cni")["addon"]
        cni = addon["addonVersion"]
        results.append(
            Result("VPC CNI", "pass", f"{cni} (HyperPod needs {floor} or later)")
            if (_semver(cni) or (0, 0, 0)) >= versions.VPC_CNI_MIN_FOR_HYPERPOD
            else Result("VPC CNI", "fail", f"{cni} is older than {floor}, which HyperPod needs ({versions.VPC_CNI_SOURCE})",
                        f"aws eks update-addon --cluster-name {name} --addon-name vpc-cni --addon-version <{floor} or later>")
        )
        results.append(_network_policy(name, addon.get("configurationValues") or "{}"))
    else:
        results.append(Result("VPC CNI", "warn", f"not an EKS add-on on {name}: a self-managed aws-node must be {floor} or later",
                              "kubectl -n kube-system get daemonset aws-node -o jsonpath='{..image}'"))
        results.append(Result("VPC CNI network policy", "warn",
                              f"not an EKS add-on on {name}: its network policy agent must run with --enable-network-policy=true, "
                              "or the team namespaces' NetworkPolicies are not enforced",
                              "kubectl -n kube-system get daemonset aws-node -o jsonpath='{..args}'"))
    agent = "eks-pod-identity-agent"
    if ec.install_pod_identity_agent:
        results.append(
            Result("Pod Identity agent", "fail", f"already installed on {name}: a second CreateAddon fails", "set eks.existing_cluster.install_pod_identity_agent false")
            if agent in installed
            else Result("Pod Identity agent", "pass", "not installed yet; the deploy installs it")
        )
    else:
        results.append(
            Result("Pod Identity agent", "pass", f"installed on {name}")
            if agent in installed
            else Result("Pod Identity agent", "fail", f"missing on {name}: the training operator, observability and the job's role need it",
                        f"set eks.existing_cluster.install_pod_identity_agent true, or aws eks create-addon --cluster-name {name} --addon-name {agent}")
        )
    for addon in registry.plan(settings):
        if isinstance(addon, ManagedAddon) and (addon.existing or addon.eks_name in installed):
            results.append(_existing_addon(settings, addon, installed, eks))
    entries = eks.list_access_entries(clusterName=name).get("accessEntries", [])
    # The principals the deploy gives an entry, matched as IAM and EKS match them (infra/identity.py).
    given = [("eks.admin_principal_arns", arn) for arn in settings.eks.admin_principal_arns]
    given += [(f"governance.teams[{i}].principals", arn) for i, t in enumerate(settings.governance.teams) for arn in t.principals]
    for field, arn in given:
        entry = next((e for e in entries if identity.same(arn, e)), None)
        if entry is not None:
            results.append(Result(f"access entry {arn.rsplit('/', 1)[-1]}", "fail", f"{arn} already has an access entry on {name} ({entry}): a second one fails",
                                  f"leave it out of {field} (it has access already)"))
    if ec.kubectl_role_arn and not any(identity.same(ec.kubectl_role_arn, e) for e in entries):
        results.append(Result("kubectl role", "fail", f"{ec.kubectl_role_arn} has no access entry on {name}: the chart's install would be refused",
                              f"aws eks create-access-entry --cluster-name {name} --principal-arn {ec.kubectl_role_arn}, then associate "
                              "AmazonEKSClusterAdminPolicy; or leave kubectl_role_arn out and the stack makes one"))
    results.append(_existing_chart(settings, aws))
    return results


def _network_policy(cluster: str, values: str) -> Result:
    """The cluster's own VPC CNI add-on enforces NetworkPolicies only with its network policy
    agent on; this project does not configure a VPC CNI it did not install."""
    import yaml

    from infra.config.eks import NETWORK_POLICY_KEY, NETWORK_POLICY_ON

    try:  # EKS takes configuration values as JSON or YAML
        given = yaml.safe_load(values).get(NETWORK_POLICY_KEY)
    except (yaml.YAMLError, AttributeError):
        given = None
    if given == NETWORK_POLICY_ON:
        return Result("VPC CNI network policy", "pass", f"{NETWORK_POLICY_KEY} is \"{NETWORK_POLICY_ON}\"")
    return Result(
        "VPC CNI network policy", "fail",
        f"{NETWORK_POLICY_KEY} is {given!r} on {cluster}'s vpc-cni add-on: the team namespaces' and the job's NetworkPolicies "
        "would not be enforced, and every team's pods could reach every other's",
        f"aws eks update-addon --cluster-name {cluster} --addon-name vpc-cni --configuration-values "
        f"'{{\"{NETWORK_POLICY_KEY}\": \"{NETWORK_POLICY_ON}\"}}' (merged with its other values)",
    )


def _existing_addon(settings: Settings, addon, installed: set[str], eks) -> Result:
    """One line for an EKS add-on the deploy would create that the cluster has (what config
    should say), or one config adopts (there, and at a version what needs it accepts)."""
    from infra.config.addons import version_floors
    from infra import versions

    name, check, key = settings.eks_cluster_name, f"add-on {addon.eks_name}", f"addons.{addon.key}"
    if addon.eks_name not in installed:
        return Result(check, "fail", f"{key}.existing is true, but {name} has no {addon.eks_name} add-on",
                      f"set {key}.existing false (or leave it out), and the deploy installs it")
    found = eks.describe_addon(clusterName=name, addonName=addon.eks_name)["addon"]
    running, status = found.get("addonVersion", "?"), found.get("status", "UNKNOWN")
    if not addon.existing:
        return Result(check, "fail", f"{name} already runs it ({running}): the addons stack's CreateAddon would fail",
                      f"set {key}.existing: true to use it")
    floors = [f for f in version_floors(settings) if f.key == addon.key]
    short = [f for f in floors if not versions.addon_version_at_least(running, f.minimum)]
    if short:
        f = short[0]
        return Result(check, "fail", f"{running} is older than {f.minimum}, which {f.needed_by} needs ({f.source})",
                      f"have its owner update it: aws eks update-addon --cluster-name {name} --addon-name {addon.eks_name} "
                      f"--addon-version <{f.minimum} or newer>{_migration_note(running, addon.eks_name)}")
    accepts = "; ".join(f"{f.needed_by} needs {f.minimum} or newer" for f in floors) or "nothing here asks for a version of it"
    if status != "ACTIVE":
        return Result(check, "warn", f"adopted: {running}, {status}", f"aws eks describe-addon --cluster-name {name} --addon-name {addon.eks_name}")
    return Result(check, "pass", f"adopted: {running} ({accepts})")


def _migration_note(running: str, addon: str) -> str:
    """Where an update of task governance out of v1.3.x crosses the Kueue CRD migration."""
    from infra import versions

    if addon != "amazon-sagemaker-hyperpod-taskgovernance" or versions.addon_version_at_least(running, versions.TASK_GOVERNANCE_CRD_MIGRATION):
        return ""
    return f"; to {versions.TASK_GOVERNANCE_CRD_MIGRATION} or later only through the migration: {versions.TASK_GOVERNANCE_MIGRATION_WAYS}"


# What the quick setup's helm-chart-template.yaml takes (HelmRelease, Namespace, EKSClusterName)
# and answers (HelmChartDeploymentComplete): its stack is how the account shows the release.
QUICK_SETUP_CHART_OUTPUT = "HelmChartDeploymentComplete"


def _existing_chart(settings: Settings, aws: Clients) -> Result:
    """The HyperPod dependencies chart the quick setup installed on the cluster: a second
    release of it fails on the objects the first owns ("invalid ownership metadata"); the same
    release name makes the deploy upgrade it in place (helm upgrade --install)."""
    name, ours = settings.eks_cluster_name, settings.hyperpod.helm_chart.release
    check = "dependencies chart"
    for page in aws("cloudformation").get_paginator("describe_stacks").paginate():
        for stack in page["Stacks"]:
            params = {p["ParameterKey"]: p.get("ParameterValue") for p in stack.get("Parameters", [])}
            outputs = {o["OutputKey"] for o in stack.get("Outputs", [])}
            if params.get("EKSClusterName") != name or "HelmRelease" not in params or QUICK_SETUP_CHART_OUTPUT not in outputs:
                continue
            release, namespace = params["HelmRelease"], params.get("Namespace", "kube-system")
            where = f"release {release} in {namespace} (stack {stack['StackName']})"
            if namespace != "kube-system":
                return Result(check, "fail", f"{name} runs the HyperPod dependencies chart as {where}; HyperPod's must be in kube-system",
                              f"have its owner remove it (helm uninstall {release} -n {namespace}) before this deploy installs it in kube-system")
            if release != ours:
                return Result(check, "fail", f"{name} runs the HyperPod dependencies chart as {where}: a second release of it fails on the objects the first owns",
                              f"set hyperpod.helm_chart.release to \"{release}\": the deploy then upgrades that release to this revision and values")
            return Result(check, "warn", f"the deploy upgrades {where} to revision {settings.hyperpod.helm_chart.revision[:12]}",
                          "destroying this environment uninstalls that release too, and the cluster's other workloads lose its device plugins")
    return Result(check, "pass", f"no quick-setup stack installed the chart on {name} (a release installed by hand shows in `helm list -n kube-system`)")


def check_existing_subnets(settings: Settings, aws: Clients) -> list[Result]:
    """Each existing HyperPod subnet has a free address for every node and, to run pods at
    EKS's max-pods density, one per pod (the VPC CNI gives each pod a subnet address)."""
    from infra import catalogue
    from infra.config.network import _max_pods

    subnets = [sn for sn in settings.network.hyperpod_subnets if sn.subnet_id]
    if not subnets:
        return []
    free = {s["SubnetId"]: s["AvailableIpAddressCount"] for s in aws("ec2").describe_subnets(SubnetIds=[sn.subnet_id for sn in subnets])["Subnets"]}
    default_az = settings.network.hyperpod_subnets[0].availability_zone
    results = []
    for sn in subnets:
        groups = [g for g in settings.hyperpod.instance_groups if (g.availability_zone or default_az) == sn.availability_zone]
        nodes = sum(g.ceiling for g in groups)
        dense = sum(g.ceiling * (1 + _max_pods(g.spec.vcpus)) for g in groups if catalogue.figures(g.instance_type))
        have, check = free.get(sn.subnet_id, 0), f"subnet {sn.subnet_id}"
        if have < nodes:
            results.append(Result(check, "fail", f"{have} free addresses for {nodes} nodes in {sn.availability_zone}",
                                  "free addresses there, or give a larger subnet in network.hyperpod_subnets"))
        elif have < dense:
            results.append(Result(check, "warn", f"{have} free addresses; {nodes} nodes at EKS's max-pods density need {dense}",
                                  "pods beyond that stay Pending; a larger subnet avoids it"))
        else:
            results.append(Result(check, "pass", f"{have} free addresses for {nodes} nodes and their pods"))
    return results


def check_existing_security_group(settings: Settings, aws: Clients) -> list[Result]:
    """network.existing_security_group_id has the rules the stack gives a group it creates (as
    both references do): all traffic from and to itself (EFA, which a 0.0.0.0/0 rule does not
    cover; Lustre's 988 and 1018-1023) and all egress (AWS APIs, registries)."""
    group_id = settings.network.existing_security_group_id
    if not group_id:
        return []
    try:
        (group,) = aws("ec2").describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) != "InvalidGroup.NotFound":
            raise
        return [Result(f"security group {group_id}", "fail", f"does not exist in {aws.region}", "fix network.existing_security_group_id")]

    def every_protocol(rules: list[dict], *, to_self: bool = False, anywhere: bool = False) -> bool:
        return any(
            r.get("IpProtocol") == "-1"
            and ((to_self and any(p.get("GroupId") == group_id for p in r.get("UserIdGroupPairs", [])))
                 or (anywhere and any(c.get("CidrIp") == "0.0.0.0/0" for c in r.get("IpRanges", []))))
            for r in rules
        )

    check, vpc = f"security group {group_id}", settings.network.existing_vpc.vpc_id
    if group.get("VpcId") != vpc:
        return [Result(check, "fail", f"is in {group.get('VpcId')}, not network.existing_vpc {vpc}", "name a group of that VPC")]
    needs = (
        ("all traffic from itself", every_protocol(group.get("IpPermissions", []), to_self=True),
         f"aws ec2 authorize-security-group-ingress --group-id {group_id} --ip-permissions IpProtocol=-1,UserIdGroupPairs=[{{GroupId={group_id}}}]"),
        ("all traffic to itself (EFA)", every_protocol(group.get("IpPermissionsEgress", []), to_self=True),
         f"aws ec2 authorize-security-group-egress --group-id {group_id} --ip-permissions IpProtocol=-1,UserIdGroupPairs=[{{GroupId={group_id}}}]"),
        ("all egress", every_protocol(group.get("IpPermissionsEgress", []), anywhere=True),
         f"aws ec2 authorize-security-group-egress --group-id {group_id} --ip-permissions IpProtocol=-1,IpRanges=[{{CidrIp=0.0.0.0/0}}]"),
    )
    return [
        Result(f"{check} {what}", "pass", "allowed") if present else Result(f"{check} {what}", "fail", "missing: HyperPod nodes need it", command)
        for what, present, command in needs
    ]


def check_existing_lifecycle_bucket(settings: Settings, aws: Clients) -> list[Result]:
    """hyperpod.existing_lifecycle_bucket exists in this region, and its default encryption is
    one the stacks can work with: SSE-S3 or the AWS managed key. Under a customer managed key
    the upload Lambda and the nodes would need grants on a key the stacks do not know."""
    name = settings.hyperpod.existing_lifecycle_bucket
    if not name:
        return []
    s3, check = aws("s3"), f"bucket {name}"
    try:
        region = s3.get_bucket_location(Bucket=name).get("LocationConstraint") or "us-east-1"
    except Exception as err:  # noqa: BLE001
        if _error_code(err) not in ("NoSuchBucket", "404", "AccessDenied", "403"):
            raise
        return [Result(check, "fail", f"does not exist or is not this account's ({_error_code(err)})", "fix hyperpod.existing_lifecycle_bucket")]
    if region != aws.region:
        return [Result(check, "fail", f"is in {region}; HyperPod reads lifecycle scripts from {aws.region}", "name a bucket in the cluster's region")]
    try:
        rules = s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]["Rules"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) != "ServerSideEncryptionConfigurationNotFoundError":
            raise
        rules = []
    default = next((r["ApplyServerSideEncryptionByDefault"] for r in rules if "ApplyServerSideEncryptionByDefault" in r), {})
    key = default.get("KMSMasterKeyID", "")
    if default.get("SSEAlgorithm", "").startswith("aws:kms") and key and not key.endswith("alias/aws/s3"):
        return [Result(check, "fail", f"encrypts with customer managed key {key}, which the stacks grant neither the upload nor the nodes",
                       "name a bucket under SSE-S3 or the AWS managed key aws/s3")]
    return [Result(check, "pass", f"in {region}, {default.get('SSEAlgorithm', 'AES256')}")]


# What the hyperpod stack grants its own execution role (stacks/hyperpod.py _execution_role), as
# (what for, actions, resource to simulate them on): a role of yours must be able to do the same.
def _execution_role_needs(settings: Settings, aws: Clients) -> list[tuple[str, tuple[str, ...], str]]:
    from infra import naming

    p, region, account = naming.partition(aws.region), aws.region, settings.account
    bucket = settings.lifecycle_bucket_name
    needs = [
        ("lifecycle scripts", ("s3:GetObject",), f"arn:{p}:s3:::{bucket}/lifecycle/on_create.sh"),
        ("lifecycle bucket", ("s3:ListBucket",), f"arn:{p}:s3:::{bucket}"),
        ("VPC CNI network interfaces", ("ec2:CreateNetworkInterface", "ec2:AttachNetworkInterface", "ec2:AssignPrivateIpAddresses",
                                        "ec2:DeleteNetworkInterface", "ec2:CreateTags"),
         f"arn:{p}:ec2:{region}:{account}:network-interface/*"),
        ("describe and pull", ("ec2:DescribeNetworkInterfaces", "ec2:DescribeInstances", "ecr:GetAuthorizationToken", "ecr:BatchGetImage",
                               "ecr:GetDownloadUrlForLayer", "cloudwatch:DescribeAlarms", *(("fsx:DescribeFileSystems",) if settings.fsx.enabled else ())),
         "*"),
        ("Pod Identity", ("eks-auth:AssumeRoleForPodIdentity",), f"arn:{p}:eks:{region}:{account}:cluster/{settings.eks_cluster_name}"),
    ]
    enc = settings.hyperpod.volume_encryption
    if enc is not None and enc.kms_key_arn:  # keys the stack creates name the role in their key policy
        needs.append(("volume key", ("kms:CreateGrant", "kms:DescribeKey"), enc.kms_key_arn))
    return needs


def check_existing_execution_role(settings: Settings, aws: Clients) -> list[Result]:
    """hyperpod.existing_execution_role_arn, which the stack uses as it is: trusted by SageMaker,
    with AmazonSageMakerClusterInstanceRolePolicy (both as the quick setup's and awsome's role
    templates make theirs), and allowed what the stack grants its own role, by IAM's policy
    simulator. The references check none of this before the nodes boot. A volume key's own key
    policy may let the role in where IAM does not: that case warns, as the simulator reads only
    the role's policies."""
    import json as _json
    from urllib.parse import unquote

    arn = settings.hyperpod.existing_execution_role_arn
    if not arn:
        return []
    iam, name = aws("iam"), identity.parse(arn).name  # GetRole takes the name without its path
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except Exception as err:  # noqa: BLE001
        if _error_code(err) not in ("NoSuchEntity", "AccessDenied"):
            raise
        return [Result("execution role", "fail", f"{arn} cannot be read here ({_error_code(err)})", "fix hyperpod.existing_execution_role_arn")]
    if role["Arn"] != arn:
        return [Result("execution role", "fail", f"{name} is {role['Arn']}, not {arn}", "give hyperpod.existing_execution_role_arn its path as IAM has it")]
    trust = role.get("AssumeRolePolicyDocument", {})
    trust = _json.loads(unquote(trust)) if isinstance(trust, str) else trust
    statements = trust.get("Statement", [])
    trusted = any(
        s.get("Effect") == "Allow" and "sts:AssumeRole" in _as_list(s.get("Action"))
        and "sagemaker.amazonaws.com" in _as_list(s.get("Principal", {}).get("Service"))
        for s in (statements if isinstance(statements, list) else [statements])
    )
    results = [Result("execution role trust", "pass" if trusted else "fail",
                      "sagemaker.amazonaws.com may assume it" if trusted else "its trust policy does not let sagemaker.amazonaws.com assume it",
                      "" if trusted else "allow sts:AssumeRole to the service principal sagemaker.amazonaws.com")]
    attached = {pol["PolicyName"] for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=name) for pol in page["AttachedPolicies"]}
    managed = "AmazonSageMakerClusterInstanceRolePolicy"  # stacks.hyperpod.INSTANCE_ROLE_POLICY, without a CDK import
    results.append(Result("execution role managed policy", "pass" if managed in attached else "fail",
                          f"{managed} {'attached' if managed in attached else 'not attached'}",
                          "" if managed in attached else f"aws iam attach-role-policy --role-name {name} --policy-arn arn:aws:iam::aws:policy/{managed}"))
    for what, actions, resource in _execution_role_needs(settings, aws):
        answers = iam.simulate_principal_policy(PolicySourceArn=arn, ActionNames=list(actions), ResourceArns=[resource])["EvaluationResults"]
        denied = sorted(a["EvalActionName"] for a in answers if a["EvalDecision"] != "allowed")
        if not denied:
            results.append(Result(f"execution role: {what}", "pass", f"{', '.join(actions)} on {resource}"))
        else:
            results.append(Result(f"execution role: {what}", "warn" if what == "volume key" else "fail",
                                  f"may not {', '.join(denied)} on {resource}" + (" by its IAM policies (the key policy may still allow it)" if what == "volume key" else ""),
                                  "grant it as stacks/hyperpod.py grants the stack's own execution role"))
    return results


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value] if value else []


DRIFT_CHECKS = (check_drift_nodes, check_drift_images, check_drift_addons, check_drift_chart)

CHECKS = (
    check_account,
    check_zones,
    check_quotas,
    check_eks_name,
    check_existing_cluster,
    check_existing_subnets,
    check_existing_security_group,
    check_existing_lifecycle_bucket,
    check_existing_execution_role,
    check_hyperpod_name,
    check_eks_version,
    check_addon_versions,
    check_admins,
    check_named_resources,
    check_volume_key,
    check_retained_names,
    check_existing_vpc_endpoints,
    check_operations_topic,
    check_bootstrap,
    *DRIFT_CHECKS,
)


class NoCredentials(RuntimeError):
    """No usable credentials: one line saying which and what to do, before any check runs."""


# STS's answers for credentials it will not take (its API reference and the IAM
# troubleshooting guide): every check would fail the same way, so preflight stops at once.
REFUSED_CREDENTIALS = ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                       "SignatureDoesNotMatch", "AccessDenied")


def _credentials_problem(err, profile: str | None, command: str = "preflight") -> str | None:
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError, ProfileNotFound, TokenRetrievalError

    where = f"profile {profile!r}" if profile else "the default credential chain"
    if isinstance(err, ProfileNotFound):
        # Without --profile, the name came from the environment (AWS_PROFILE, AWS_DEFAULT_PROFILE).
        named = err.kwargs.get("profile")
        given = f"--profile {profile}" if profile else next(
            (f"{var}={os.environ[var]}" for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE") if os.environ.get(var) == named),
            f"profile {named!r}")
        return f"{given}: no such profile in ~/.aws/config or ~/.aws/credentials; `aws configure list-profiles` lists them"
    if isinstance(err, (NoCredentialsError, PartialCredentialsError)):
        return f"no AWS credentials from {where}; run `aws configure` or `aws sso login`, or pass --profile"
    if isinstance(err, TokenRetrievalError):
        return f"the SSO token of {where} has expired; run `aws sso login{' --profile ' + profile if profile else ''}`"
    code = _error_code(err)
    if code in REFUSED_CREDENTIALS:
        return f"AWS refused the credentials of {where} ({code}): renew them (`aws sso login`, or new keys) and run {command} again"
    return None


def client(settings: Settings, service: str, *, region: str | None = None, profile: str | None = None,
           verify_as: str | None = None):
    """One client for a command beside preflight (upgrade-plan, accept), failing as preflight does.
    `verify_as` (the command's name): ask STS first, so refused credentials stop the command in one
    line before anything runs."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    command = verify_as or "preflight"
    try:
        session = boto3.Session(profile_name=profile, region_name=region or settings.region)
        if verify_as:
            session.client("sts").get_caller_identity()
    except (BotoCoreError, ClientError) as err:
        raise NoCredentials(_credentials_problem(err, profile, command) or str(err)) from None
    return session.client(service, region_name=region or settings.region)


def failure_line(err, profile: str | None) -> str:
    """One line for an AWS error: what to do about the credentials, or the error itself."""
    return _credentials_problem(err, profile) or f"{_error_code(err)}: {err}"


def run(settings: Settings, *, region: str | None = None, profile: str | None = None, session=None, clients: dict | None = None) -> list[Result]:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    region = region or settings.region
    try:
        session = session or boto3.Session(profile_name=profile, region_name=region)
    except BotoCoreError as err:
        raise NoCredentials(_credentials_problem(err, profile) or str(err)) from None
    aws = Clients(session, region, clients)
    results = []
    for check in CHECKS:
        try:
            results += check(settings, aws)
        except (BotoCoreError, ClientError) as err:
            problem = _credentials_problem(err, profile) if check is check_account else None
            if problem:
                raise NoCredentials(problem) from None
            results.append(Result(check.__name__.removeprefix("check_"), "fail", f"could not check: {err}", "check credentials and permissions"))
    return results


def table(results: list[Result]) -> str:
    width = max([len(r.check) for r in results] + [5])
    lines = [f"{'check':<{width}}  status  detail"]
    section = ""
    for r in results:
        if r.section != section and r.section == DRIFT:
            lines.append("-- drift: the deployed cluster against config (pass: as config says, or expected) --")
        section = r.section
        lines.append(f"{r.check:<{width}}  {r.status:<6}  {r.detail}")
        if r.action and r.status != "pass":
            lines.append(f"{'':<{width}}          -> {r.action}")
    failed = sum(r.status == "fail" for r in results)
    lines.append(f"{len(results)} checks: {failed} failed, {sum(r.status == 'warn' for r in results)} warnings")
    return "\n".join(lines)
