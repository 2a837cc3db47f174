"""Names derived from config, in one place so stacks, the sample job and the CLI agree."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Stacks in deploy order; each name is "<prefix>-<env>-<suffix>".
STACK_SUFFIXES = ("network", "cluster", "hyperpod", "operations", "addons", "sample-job")
# The network stack's output listing every CIDR block of the VPC (an imported one's too, which
# no resource in the template names); the review judges "outside the VPC" by it.
VPC_CIDR_BLOCKS_OUTPUT = "VpcCidrBlocks"
# Both AWS references tag the HyperPod cluster so; AWS-managed HyperPod policies key on it. It
# counts against the cluster's tag limit beside config's own.
HYPERPOD_CLUSTER_TAGS = {"SageMaker": "true"}
# The hyperpod stack's output recording the dependencies chart revision deployed beside the
# cluster: what preflight's drift section compares with hyperpod.helm_chart.revision.
CHART_REVISION_OUTPUT = "DependenciesChartRevision"
# Where pods see the shared FSx for Lustre file system (the claim `fsx` in team namespaces).
FSX_MOUNT = "/fsx"

# AWS::SageMaker::Cluster ClusterName and InstanceGroupName, and most SageMaker names.
SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
# AWS::EKS::Cluster Name: 1-100 characters.
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")
# CloudFormation stack names: letter first, alphanumerics and hyphens, at most 128.
STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
# Kubernetes namespace (RFC 1123 label).
K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
K8S_LABEL_MAX = 63


def partition(region: str) -> str:
    """The AWS partition a region belongs to (a test holds this against botocore's endpoint data)."""
    for start, name in (("cn-", "aws-cn"), ("us-gov-", "aws-us-gov"), ("us-isob-", "aws-iso-b"), ("us-isof-", "aws-iso-f"), ("us-iso-", "aws-iso"),
                        ("eu-isoe-", "aws-iso-e"), ("eusc-", "aws-eusc")):
        if region.startswith(start):
            return name
    return "aws"


def stack_name(prefix: str, env: str, suffix: str) -> str:
    return f"{prefix}-{env}-{suffix}"


def default_eks_cluster_name(prefix: str, env: str) -> str:
    return f"{prefix}-{env}"


def default_hyperpod_cluster_name(prefix: str, env: str) -> str:
    return f"{prefix}-{env}-hp"


def operations_topic_name(prefix: str, env: str) -> str:
    """The SNS topic events and alerts go to: named, so the Prometheus workspace's alert
    manager (in the addons stack, deployed right after the operations stack) can name its ARN
    without an import."""
    return f"{prefix}-{env}-operations"


@dataclass(frozen=True)
class TeamNames:
    """What task governance creates for a team, and the labels a job uses to join it."""

    team: str
    namespace: str
    local_queue: str
    cluster_queue: str
    # The Kubernetes group a team's people are mapped to, and its roles: the names the
    # dependencies chart's team-role-and-bindings subchart gives them.
    group: str = ""
    role: str = ""
    cluster_role: str = ""

    def priority_class(self, priority: str) -> str:
        return priority_class_name(priority)


def team_names(team: str) -> TeamNames:
    namespace = f"hyperpod-ns-{team}"
    return TeamNames(
        team=team,
        namespace=namespace,
        local_queue=f"{namespace}-localqueue",
        cluster_queue=f"{namespace}-clusterqueue",
        group=f"{namespace}-namespace-level-group",
        role=f"{namespace}-namespace-role",
        cluster_role=f"{namespace}-cluster-role",
    )


def priority_class_name(priority: str) -> str:
    return f"{priority}-priority"


def construct_key(name: str) -> str:
    """What CloudFormation keeps of a top-level construct id in its logical id: letters and
    digits only, so two names equal under this collide."""
    return re.sub(r"[^A-Za-z0-9]", "", name)


def admin_entry_id(arn: str) -> str:
    """The construct id of an admin principal's EKS access entry, keyed by the principal."""
    return "Admin-" + construct_key(arn.split(":", 4)[4])


def team_entry_id(team: str, arn: str) -> str:
    """The construct id of a team member's EKS access entry, keyed by team and principal."""
    return f"Access-{team}-" + construct_key(arn.split(":", 4)[4])


def lifecycle_bucket_name(prefix: str, env: str, account: str, region: str) -> str:
    """HyperPod reads lifecycle scripts from buckets named sagemaker-* (the prefix the
    AmazonSageMakerClusterInstanceRolePolicy grants and the service validates)."""
    return f"sagemaker-{prefix}-{env}-lc-{account}-{region}"


def checkpoint_bucket_name(prefix: str, env: str, account: str, region: str) -> str:
    """Fixed, so `hyperpod-cdk render-job` writes the same checkpoint URI the stack's job uses."""
    return f"{prefix}-{env}-ckpt-{account}-{region}"


S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# S3 user guide, general purpose bucket naming rules: prefixes and suffixes S3 reserves.
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_bucket_name_problem(name: str) -> str | None:
    """What in `name` breaks S3's general purpose bucket naming rules, or None."""
    if not S3_BUCKET.match(name):
        return "3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
    if ".." in name:
        return "two adjacent periods"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return "an IP address"
    for prefix in S3_RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"the reserved prefix {prefix!r}"
    for suffix in S3_RESERVED_SUFFIXES:
        if name.endswith(suffix):
            return f"the reserved suffix {suffix!r}"
    return None
