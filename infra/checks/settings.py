"""The rules on the whole config: the names every resource derives from the environment, and
the region."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from infra import cfn_schema, hyperpod_chart, naming
from infra.config.base import Problems, collisions
from infra.config.settings import Settings


def check_names(s: Settings, p: Problems):
    for suffix in naming.STACK_SUFFIXES:
        name = s.stack_name(suffix)
        if not naming.STACK_NAME.match(name):
            p.error("prefix", s.prefix, f"makes stack name {name!r}, which breaks the CloudFormation stack-name pattern")
    if not naming.K8S_LABEL.match(s.env_name) or len(s.env_name) > 20:
        p.error("env", s.env_name, "must be lowercase letters, digits and hyphens, at most 20 characters")
    eks_name = s.eks_cluster_name
    if not s.uses_existing_cluster and not naming.EKS_CLUSTER_NAME.match(eks_name):  # an existing one: check_existing_cluster
        p.error("eks.cluster_name", eks_name, "must match [0-9A-Za-z][A-Za-z0-9-_]*, 1-100 characters")
    hp_name = s.hyperpod_cluster_name
    if not naming.SAGEMAKER_NAME.match(hp_name):
        p.error(
            "hyperpod.cluster_name", hp_name, "must be 1-63 letters, digits and hyphens, starting and ending alphanumeric"
        )
    for kind, bucket in (("lifecycle", s.lifecycle_bucket_name), ("checkpoint", s.checkpoint_bucket_name)):
        broken = naming.s3_bucket_name_problem(bucket)
        if broken and kind == "lifecycle" and s.hyperpod.existing_lifecycle_bucket:
            p.error("hyperpod.existing_lifecycle_bucket", bucket, f"is not a bucket name S3 allows: {broken}")
        elif broken:
            p.error("prefix", s.prefix, f"with env {s.env_name!r} makes {kind} bucket {bucket!r}, which S3 refuses: {broken}")
    check_mirror_names(s, p)
    # SageMaker's tag rules are the strictest of the services tagged (its CloudFormation schema).
    tag = cfn_schema.definition("AWS::SageMaker::Cluster", "Tag")["properties"]
    ours = {k.lower(): k for k in s.all_tags if k not in s.tags}
    for a, b in collisions(list(s.tags), str.lower):
        p.error("tags", b, f"and {a!r} differ only in case; IAM tag keys are case-insensitive, so the roles could not take both")
    for key in s.tags:
        if key.lower() in ours:
            p.error("tags", key, f"differs only in case from the tag {ours[key.lower()]!r} every resource gets; IAM tag keys are case-insensitive")
    for key, value in s.tags.items():
        if key.lower().startswith("aws:") or not cfn_schema.matches(tag["Key"], key):
            p.error("tags", key, f"is not a tag key SageMaker accepts: {cfn_schema.describe(tag['Key'])}, not starting 'aws:'")
        elif not cfn_schema.matches(tag["Value"], value):
            p.error(f"tags.{key}", value, f"is not a tag value SageMaker accepts: {cfn_schema.describe(tag['Value'])}; letters, digits, spaces and _ . : / = + - @")


def check_mirror_names(s: Settings, p: Problems):
    """The ECR repositories the chart's images would be copied into (AWS::ECR::Repository
    RepositoryName in cfn-lint's schema: the OCI repository-name grammar, 2-256 characters)."""
    rule = cfn_schema.resource("AWS::ECR::Repository")["properties"]["RepositoryName"]
    for image in hyperpod_chart.CHART_IMAGES:
        name = hyperpod_chart.mirror_name(s, image)
        if not cfn_schema.matches(rule, name):
            p.error("prefix", s.prefix, f"with env {s.env_name!r} makes ECR repository {name!r}, which breaks {rule['pattern']}")
            return


def check_region(s: Settings, p: Problems):
    """The region must be one CloudFormation has (cfn-lint's region list). Whether each type
    this config creates exists there no offline file settles: cfn-lint's per-region lists are a
    snapshot (in 1.58, us-west-2 lacks ClusterSchedulerConfig and ap-northeast-1 ComputeQuota,
    though task governance ships both together). A type missing from the snapshot is a warning,
    and `preflight` asks the account (CloudFormation DescribeType)."""
    if not cfn_schema.known_region(s.region):
        p.error("region", s.region, "is not an AWS region CloudFormation knows (per cfn-lint's region list)")
        return
    partition = naming.partition(s.region)
    if partition not in hyperpod_chart.image_partitions():
        # Nothing in this project can copy it over: the mirror's copy runs in the target partition too.
        p.error(
            "region", s.region,
            f"is in partition {partition}, where the pinned HyperPod chart has no health-monitoring agent image: its "
            f"_helpers.tpl names registries in {len(hyperpod_chart.HEALTH_AGENT_ACCOUNTS)} regions of partition "
            f"{', '.join(sorted(hyperpod_chart.image_partitions()))} only and falls back to us-east-1's, which ECR in {partition} "
            "cannot pull from (source: aws/sagemaker-hyperpod-cli helm_chart/HyperPodHelmChart charts/health-monitoring-agent/"
            "templates/_helpers.tpl at the pinned revision, as infra/hyperpod_chart.py HEALTH_AGENT_ACCOUNTS reads it)",
        )
    missing = [t for t in s.regional_resource_types if not cfn_schema.region_has(s.region, t)]
    if missing:
        p.warn(f"region: {s.region} is missing {', '.join(missing)} in cfn-lint's region list, an offline snapshot that "
               "lags CloudFormation; `hyperpod-cdk preflight` asks the account's CloudFormation (DescribeType)")


# Where each name must be unique: EKS's CreateCluster ("The name must be unique within the Amazon Web
# Services Region and Amazon Web Services account", botocore's eks model); SageMaker's DescribeCluster
# finds a HyperPod cluster by its name alone in an account and region (botocore's sagemaker model).
UNIQUE_NAMES = (
    ("eks.cluster_name", "EKS cluster", "EKS CreateCluster: unique within the account and region"),
    ("hyperpod.cluster_name", "HyperPod cluster", "SageMaker DescribeCluster finds a HyperPod cluster by its name in an account and region"),
)


def cluster_names(s: Settings) -> dict[str, str]:
    """The cluster names `s` creates, by their field: the EKS one unless it joins an existing cluster."""
    names = {"hyperpod.cluster_name": s.hyperpod_cluster_name}
    if not s.uses_existing_cluster:
        names["eks.cluster_name"] = s.eks_cluster_name
    return names


def environment_clashes(context: Mapping[str, Any], s: Settings) -> list[str]:
    """Each cluster name `s` creates that another environment of the same cdk.json creates in the same
    account and region: the second deploy fails (ResourceInUseException, or a stack that adopts the
    other's cluster). Another environment that does not parse is its own validate's to say."""
    from pydantic import ValidationError

    from infra.config.base import ConfigError
    from infra.config.loading import merged_environment

    ours, lines = cluster_names(s), []
    envs = context.get("environments")
    for other in sorted(envs) if isinstance(envs, Mapping) else []:
        if other == s.env_name:
            continue
        try:
            raw = merged_environment(context, other)
            raw.pop("env_name", None)
            them = Settings.model_validate_json(json.dumps({**raw, "env_name": other}), strict=True)
        except (ConfigError, ValidationError):
            continue
        if (them.account, them.region) != (s.account, s.region):
            continue
        theirs = cluster_names(them)
        for field, what, source in UNIQUE_NAMES:
            if field in ours and ours[field] == theirs.get(field):
                lines.append(f"{field}: {ours[field]!r} is also environment {other}'s {what} name in account {s.account}, "
                             f"region {s.region}; the name must be unique there ({source}): give one of them another")
    return lines
