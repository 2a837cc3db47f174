"""The names a deploy creates under: free, or this environment's own (an update), and those
an earlier deploy's kept buckets and log groups still hold."""

from __future__ import annotations

from cli.preflight.base import Clients, Result, error_code
from infra.config import Settings

STACK_TAG = "aws:cloudformation:stack-name"


def check_eks_name(settings: Settings, aws: Clients) -> list[Result]:
    if settings.uses_existing_cluster:
        return []  # it must exist: check_existing_cluster
    name, ours = settings.eks_cluster_name, settings.stack_name("cluster")
    try:
        cluster = aws("eks").describe_cluster(name=name)["cluster"]
    except Exception as err:  # noqa: BLE001 - boto3 error classes are per client
        if error_code(err) == "ResourceNotFoundException":
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
        if error_code(err) in ("ResourceNotFound", "ValidationException"):
            return [Result("HyperPod name", "pass", f"no HyperPod cluster named {name}")]
        raise
    tags = {t["Key"]: t["Value"] for t in sagemaker.list_tags(ResourceArn=arn).get("Tags", [])}
    if tags.get(STACK_TAG) == ours:
        return [Result("HyperPod name", "pass", f"{name} exists and belongs to {ours} (an update)")]
    return [
        Result("HyperPod name", "fail", f"a HyperPod cluster {name} exists (stack: {tags.get(STACK_TAG, 'none')})", "set hyperpod.cluster_name")
    ]


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
                if error_code(err) not in ("404", "NoSuchBucket", "NotFound"):
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
        if error_code(err) != "ValidationError":
            raise
        return False
    return status != "DELETE_COMPLETE"
