"""The account and region a deploy goes to: whose credentials these are (and one line, before
anything runs, where there are none or AWS refuses them), SageMaker's service quotas for the
instance groups, the Kubernetes and add-on versions the region offers, the admin principals
and the CDK bootstrap."""

from __future__ import annotations

import os
import re

from cli.review.exposure import quota_name
from cli.preflight.base import Clients, Result, error_code
from infra import identity, versions
from infra.config import Settings

CDK_TOOLKIT_STACK = "CDKToolkit"


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
            # SageMaker has no API that lists the types HyperPod offers in a region; its quota per
            # type is its answer (a type it does not offer there has none).
            results.append(Result(f"quota {itype}", "warn", f"no SageMaker quota named '{name}' in {aws.region}: HyperPod may not offer "
                                  f"{itype} here", "check Service Quotas > Amazon SageMaker, and HyperPod's instance types per region"))
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


def check_eks_version(settings: Settings, aws: Clients) -> list[Result]:
    version = settings.eks.version
    offered = aws("eks").describe_cluster_versions(clusterVersions=[version]).get("clusterVersions", [])
    if not offered:
        return [Result("EKS version", "fail", f"{version} is not offered in {aws.region}", "choose an offered eks.version")]
    status = offered[0].get("versionStatus", offered[0].get("status", "UNKNOWN"))
    if status in ("STANDARD_SUPPORT", "standard-support"):
        return [Result("EKS version", "pass", f"{version} is in standard support")]
    return [Result("EKS version", "warn", f"{version} is offered ({status})", "extended support costs extra per cluster-hour")]


def check_resource_types(settings: Settings, aws: Clients) -> list[Result]:
    """Whether this region's CloudFormation offers each type whose offer varies by region
    (Settings.regional_resource_types): its own answer (DescribeType), which validate's
    offline region lists (cfn-lint's, CDK's bundled validator's) can only guess at."""
    results = []
    for type_name in settings.regional_resource_types:
        check = f"type {type_name}"
        try:
            found = aws("cloudformation").describe_type(Type="RESOURCE", TypeName=type_name)
        except Exception as err:  # noqa: BLE001
            if error_code(err) != "TypeNotFoundException":
                raise
            results.append(Result(check, "fail", f"CloudFormation in {aws.region} does not offer it",
                                  "deploy to a region that offers it (HyperPod's supported regions), or turn off what creates it"))
            continue
        if found.get("DeprecatedStatus") == "DEPRECATED" or found.get("ProvisioningType") == "NON_PROVISIONABLE":
            results.append(Result(check, "fail", f"CloudFormation in {aws.region} lists it {found.get('DeprecatedStatus', '')} "
                                  f"{found.get('ProvisioningType', '')}".rstrip(), "deploy to a region where it is LIVE and provisionable"))
        else:
            results.append(Result(check, "pass", f"offered by CloudFormation in {aws.region}"))
    return results


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


HYPERPOD_ADDON_PREFIX = "amazon-sagemaker-hyperpod-"


def _published_for(aws: Clients, addon: str) -> set[str]:
    """Every Kubernetes version the region publishes some version of `addon` for (DescribeAddonVersions'
    addonVersions[].compatibilities[].clusterVersion)."""
    out = set()
    for page in aws("eks").get_paginator("describe_addon_versions").paginate(addonName=addon):
        for found in page.get("addons", []):
            for version in found.get("addonVersions", []):
                out |= {c["clusterVersion"] for c in version.get("compatibilities", []) if c.get("clusterVersion")}
    return out


def check_newer_kubernetes(settings: Settings, aws: Clients) -> list[Result]:
    """Whether every HyperPod add-on the config uses is published for a Kubernetes version newer than
    eks.version: the first of the two signs that the default can move (the other, a HyperPod page
    that lists it: infra/versions.py COMPONENT_RANGES)."""
    from cli.upgrade_plan import addons_of, owners_addons

    names = sorted({a.name for a in addons_of(settings)} | set(owners_addons(settings)))
    hyperpod = [n for n in names if n.startswith(HYPERPOD_ADDON_PREFIX)]
    if not hyperpod:
        return []
    chosen = versions.parse(settings.eks.version)
    common = set.intersection(*(_published_for(aws, name) for name in hyperpod))
    newer = sorted((v for v in common if _minor(v) and versions.parse(v) > chosen), key=versions.parse)
    check = "newer Kubernetes"
    if not newer:
        return [Result(check, "pass", f"no version newer than {settings.eks.version} has a build of every HyperPod add-on here "
                       f"({', '.join(hyperpod)}) in {aws.region}")]
    hyperpod_range = versions.COMPONENT_RANGES[0]
    documented = [v for v in newer if versions.parse(v) <= hyperpod_range.newest]
    said = (f"and HyperPod documents {', '.join(documented)}" if documented else
            f"which HyperPod does not document yet ({versions.fmt(hyperpod_range.oldest)}-{versions.fmt(hyperpod_range.newest)}; "
            f"source: {hyperpod_range.source}, read {hyperpod_range.seen})")
    return [Result(check, "warn", f"every HyperPod add-on here ({', '.join(hyperpod)}) is published for Kubernetes {', '.join(newer)} "
                   f"in {aws.region} (DescribeAddonVersions), {said}",
                   f"plan the upgrade (hyperpod-cdk upgrade-plan --to {newer[-1]}) once HyperPod's EKS prerequisites page lists it")]


def _minor(version: str) -> bool:
    return bool(re.fullmatch(r"\d+\.\d+", version))


def check_admins(settings: Settings, aws: Clients) -> list[Result]:
    """Every principal the deploy gives an access entry exists: EKS refuses an entry for one that
    does not (EKS user guide, Create access entries: "one, and only one, existing IAM principal"),
    and the teams' entries come in the addons stack, hours into a first deploy."""
    if not settings.eks.admin_principal_arns and settings.uses_existing_cluster:
        results = [Result("admin principals", "pass", f"none to add: access to {settings.eks_cluster_name} stays as it is")]
    elif not settings.eks.admin_principal_arns:
        results = [Result("admin principals", "warn", "eks.admin_principal_arns is empty", "add your role, or nobody can use kubectl")]
    else:
        results = [_principal_exists(aws, "admin", arn, "eks.admin_principal_arns", settings.account)
                   for arn in settings.eks.admin_principal_arns]
    for i, team in enumerate(settings.governance.teams):
        results += [_principal_exists(aws, f"team {team.name}:", arn, f"governance.teams[{i}].principals", settings.account)
                    for arn in team.principals]
    return results


def _principal_exists(aws: Clients, label: str, arn: str, field: str, account: str) -> Result:
    principal = identity.parse(arn, ("role", "user"))  # validated; Get* take the name without its path
    kind, name = principal.kind, principal.name
    if principal.account != account:
        return Result(f"{label} {name}", "warn", f"{arn} is of account {principal.account}; preflight looks only in {account}",
                      f"check that it exists, or fix {field}")
    try:
        aws("iam").get_role(RoleName=name) if kind == "role" else aws("iam").get_user(UserName=name)
        return Result(f"{label} {name}", "pass", f"{kind} exists")
    except Exception as err:  # noqa: BLE001
        if error_code(err) != "NoSuchEntity":
            raise
        return Result(f"{label} {name}", "fail", f"{arn} does not exist", f"create it, or fix {field}")


def check_bootstrap(settings: Settings, aws: Clients) -> list[Result]:
    try:
        stack = aws("cloudformation").describe_stacks(StackName=CDK_TOOLKIT_STACK)["Stacks"][0]
    except Exception as err:  # noqa: BLE001
        if error_code(err) != "ValidationError":
            raise
        return [
            Result("CDK bootstrap", "fail", f"no {CDK_TOOLKIT_STACK} stack in {aws.region}", f"cdk bootstrap aws://{settings.account}/{aws.region}")
        ]
    if stack["StackStatus"].endswith("_COMPLETE") and "ROLLBACK" not in stack["StackStatus"]:
        return [Result("CDK bootstrap", "pass", f"{CDK_TOOLKIT_STACK} is {stack['StackStatus']}")]
    return [Result("CDK bootstrap", "fail", f"{CDK_TOOLKIT_STACK} is {stack['StackStatus']}", "re-run cdk bootstrap")]


class PreflightStop(RuntimeError):
    """preflight cannot run as asked: one line saying why and what to do, before any check runs."""


class NoCredentials(PreflightStop):
    """No usable credentials: one line saying which and what to do, before any check runs."""


# STS's answers for credentials it will not take (its API reference and the IAM
# troubleshooting guide): every check would fail the same way, so preflight stops at once.
REFUSED_CREDENTIALS = ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                       "SignatureDoesNotMatch", "AccessDenied")


def credentials_problem(err, profile: str | None, command: str = "preflight") -> str | None:
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
    code = error_code(err)
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
        raise NoCredentials(credentials_problem(err, profile, command) or str(err)) from None
    return session.client(service, region_name=region or settings.region)


def failure_line(err, profile: str | None) -> str:
    """One line for an AWS error: what to do about the credentials, or the error itself."""
    return credentials_problem(err, profile) or f"{error_code(err)}: {err}"
