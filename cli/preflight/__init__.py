"""Read-only checks against the real account, so a deploy does not fail 40 minutes in.

Every call here is a Describe/Get/List. Each check returns pass, warn or fail with what
to do about it; `hyperpod-cdk preflight` exits non-zero when any fails.

One module per concern: `base` (the line a check reports, the clients it asks), `account`
(credentials, quotas, the versions the region offers, admins, the CDK bootstrap), `network`
(zones; an existing VPC's endpoints, subnets and security group), `names` (the names a deploy
takes, and what an earlier one kept), `resources` (what config hands in: AMIs, alarms, a
topic, a volume key, a lifecycle bucket, an execution role), `existing_cluster` (the EKS
cluster eks.existing_cluster names, and what the deploy would put on it), `drift` (the
deployed cluster against config), `session` (whether the credentials outlast the deploy
plan's minutes). This module runs them in order and prints the table; import from
`cli.preflight`.
"""

from __future__ import annotations

from cli.review.exposure import quota_name
from cli.preflight.account import (
    CDK_TOOLKIT_STACK,
    REFUSED_CREDENTIALS,
    NoCredentials,
    PreflightStop,
    check_account,
    check_addon_versions,
    check_admins,
    check_bootstrap,
    check_eks_version,
    check_newer_kubernetes,
    check_quotas,
    check_resource_types,
    client,
    credentials_problem,
    failure_line,
)
from cli.preflight.base import Clients, Result, error_code
from cli.preflight.capacity import check_capacity_reservations, check_training_plans
from cli.preflight.drift import (
    DRIFT, IMAGE_STATUS, MOVING, check_drift_addons, check_drift_chart, check_drift_images, check_drift_nodes, check_drift_operations,
)
from cli.preflight.existing_cluster import QUICK_SETUP_CHART_OUTPUT, check_existing_cluster
from cli.preflight.names import STACK_TAG, check_eks_name, check_hyperpod_name, check_retained_names, retained_names
from cli.preflight.network import check_existing_security_group, check_existing_subnets, check_existing_vpc_endpoints, check_zones
from cli.preflight.resources import (
    check_existing_execution_role,
    check_existing_lifecycle_bucket,
    check_named_resources,
    check_operations_topic,
    check_volume_key,
)
from cli.preflight.session import DeployTime, check_session, deploy_time
from infra.config import Settings

DRIFT_CHECKS = (check_drift_nodes, check_drift_operations, check_drift_images, check_drift_addons, check_drift_chart)

CHECKS = (
    check_account,
    check_zones,
    check_resource_types,
    check_quotas,
    check_training_plans,
    check_capacity_reservations,
    check_eks_name,
    check_existing_cluster,
    check_existing_subnets,
    check_existing_security_group,
    check_existing_lifecycle_bucket,
    check_existing_execution_role,
    check_hyperpod_name,
    check_eks_version,
    check_addon_versions,
    check_newer_kubernetes,
    check_admins,
    check_named_resources,
    check_volume_key,
    check_retained_names,
    check_existing_vpc_endpoints,
    check_operations_topic,
    check_bootstrap,
    *DRIFT_CHECKS,
)


def run(settings: Settings, *, region: str | None = None, profile: str | None = None, session=None, clients: dict | None = None,
        deploy=None) -> list[Result]:
    """Every check in order. `deploy`: a callable that gives the deploy's DeployTime, asked once the
    credentials are known good (after the account check), for the session check; None: no session check."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    if region and region != settings.region:  # every check would look where nothing of this config is deployed
        raise PreflightStop(f"--region {region}: env {settings.env_name} deploys to {settings.region}; drop --region or pass that one")
    region = region or settings.region
    try:
        session = session or boto3.Session(profile_name=profile, region_name=region)
    except BotoCoreError as err:
        raise NoCredentials(credentials_problem(err, profile) or str(err)) from None
    aws = Clients(session, region, clients)
    results = []
    for check in CHECKS:
        try:
            results += check(settings, aws)
        except (BotoCoreError, ClientError) as err:
            problem = credentials_problem(err, profile) if check is check_account else None
            if problem:
                raise NoCredentials(problem) from None
            results.append(Result(check.__name__.removeprefix("check_"), "fail", f"could not check: {err}", "check credentials and permissions"))
        if check is check_account and deploy is not None:
            try:
                results.append(check_session(session.get_credentials(), deploy()))
            except BotoCoreError as err:  # a refresh refused
                results.append(Result("session", "fail", f"could not read the credentials' expiry: {err}", "renew the credentials"))
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


__all__ = [
    "CDK_TOOLKIT_STACK", "CHECKS", "DRIFT", "DRIFT_CHECKS", "IMAGE_STATUS", "QUICK_SETUP_CHART_OUTPUT", "REFUSED_CREDENTIALS",
    "MOVING", "STACK_TAG", "Clients", "DeployTime", "NoCredentials", "PreflightStop", "Result", "check_account", "check_addon_versions", "check_admins",
    "check_bootstrap", "check_capacity_reservations", "check_drift_addons", "check_drift_chart", "check_drift_images", "check_drift_nodes",
    "check_drift_operations", "check_training_plans",
    "check_eks_name", "check_eks_version", "check_existing_cluster", "check_existing_execution_role",
    "check_existing_lifecycle_bucket", "check_existing_security_group", "check_existing_subnets",
    "check_existing_vpc_endpoints", "check_hyperpod_name", "check_named_resources", "check_newer_kubernetes", "check_operations_topic",
    "check_quotas", "check_resource_types", "check_retained_names", "check_session", "check_volume_key", "check_zones", "client",
    "credentials_problem", "deploy_time", "error_code", "failure_line", "quota_name", "retained_names", "run", "table",
]
