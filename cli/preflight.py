"""Read-only checks against the real account, so a deploy does not fail 40 minutes in.

Every call here is a Describe/Get/List. Each check returns pass, warn or fail with what
to do about it; `hyperpod-cdk preflight` exits non-zero when any fails.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    from addons import registry
    from addons.base import ManagedAddon

    core = settings.eks.core_addons
    wanted = {
        "vpc-cni": core.vpc_cni.version,
        "kube-proxy": core.kube_proxy.version,
        "coredns": core.coredns.version,
        "eks-pod-identity-agent": core.pod_identity_agent.version,
    }
    for addon in registry.plan(settings):
        if isinstance(addon, ManagedAddon):
            wanted[addon.eks_name] = addon.config.version
    return wanted


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
    if not settings.eks.admin_principal_arns:
        return [Result("admin principals", "warn", "eks.admin_principal_arns is empty", "add your role, or nobody can use kubectl")]
    for arn in settings.eks.admin_principal_arns:
        kind, _, path_name = arn.split(":", 5)[5].partition("/")
        name = path_name.rsplit("/", 1)[-1]
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
    out = [
        ("bucket", settings.lifecycle_bucket_name, settings.stack_name("cluster")),
        ("log group", f"/aws/eks/{settings.eks_cluster_name}/cluster", settings.stack_name("cluster")),
    ]
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


CHECKS = (
    check_account,
    check_zones,
    check_quotas,
    check_eks_name,
    check_hyperpod_name,
    check_eks_version,
    check_addon_versions,
    check_admins,
    check_named_resources,
    check_retained_names,
    check_existing_vpc_endpoints,
    check_bootstrap,
)


class NoCredentials(RuntimeError):
    """No usable credentials: one line saying which and what to do, before any check runs."""


# STS's answers for credentials it will not take (its API reference and the IAM
# troubleshooting guide): every check would fail the same way, so preflight stops at once.
REFUSED_CREDENTIALS = ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                       "SignatureDoesNotMatch", "AccessDenied")


def _credentials_problem(err, profile: str | None) -> str | None:
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError, ProfileNotFound, TokenRetrievalError

    where = f"profile {profile!r}" if profile else "the default credential chain"
    if isinstance(err, ProfileNotFound):
        return f"--profile {profile}: no such profile in ~/.aws/config or ~/.aws/credentials; `aws configure list-profiles` lists them"
    if isinstance(err, (NoCredentialsError, PartialCredentialsError)):
        return f"no AWS credentials from {where}; run `aws configure` or `aws sso login`, or pass --profile"
    if isinstance(err, TokenRetrievalError):
        return f"the SSO token of {where} has expired; run `aws sso login{' --profile ' + profile if profile else ''}`"
    code = _error_code(err)
    if code in REFUSED_CREDENTIALS:
        return f"AWS refused the credentials of {where} ({code}): renew them (`aws sso login`, or new keys) and run preflight again"
    return None


def client(settings: Settings, service: str, *, region: str | None = None, profile: str | None = None):
    """One read-only client for a command beside preflight (upgrade-plan), failing as preflight does."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.Session(profile_name=profile, region_name=region or settings.region)
    except BotoCoreError as err:
        raise NoCredentials(_credentials_problem(err, profile) or str(err)) from None
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
    for r in results:
        lines.append(f"{r.check:<{width}}  {r.status:<6}  {r.detail}")
        if r.action and r.status != "pass":
            lines.append(f"{'':<{width}}          -> {r.action}")
    failed = sum(r.status == "fail" for r in results)
    lines.append(f"{len(results)} checks: {failed} failed, {sum(r.status == 'warn' for r in results)} warnings")
    return "\n".join(lines)
