"""An environment's stacks, composed in deploy order into a scope: the one composition that hand
deploys (app.py, under the App) and the pipeline (stacks/delivery.py, under a Stage) share."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from constructs import Construct

    from infra.config import Settings
    from infra.stack import PlatformStack


def compose(scope: Construct, settings: Settings) -> list[PlatformStack]:
    """Build every stack of `settings` into `scope`, in deploy order: the App for a hand deploy
    (`cdk deploy --all` and a bare `cdk diff` see only top-level stacks), a pipeline's Stage for
    the pipeline (stacks/delivery.py). Either way each stack keeps its name and every logical ID,
    so a pipeline takes over a cluster deployed by hand without replacing anything."""
    from stacks.addons import AddonsStack
    from stacks.cluster import ClusterStack, stop_deploy_without_chart
    from stacks.hyperpod import HyperPodStack
    from stacks.network import NetworkStack
    from stacks.sample_job import SampleJobStack

    from aws_cdk import aws_iam as iam

    from infra import compliance
    from infra.stack import keep_app_logical_ids

    network = NetworkStack(scope, settings=settings)
    cluster = ClusterStack(scope, settings=settings, network=network)
    hyperpod = HyperPodStack(scope, settings=settings, network=network, cluster=cluster)
    stacks = [network, cluster, hyperpod]
    operations = None
    if settings.operations.enabled:
        from stacks.operations import OperationsStack

        operations = OperationsStack(scope, settings=settings, after=hyperpod)
        stacks.append(operations)
    addons = AddonsStack(scope, settings=settings, cluster=cluster, hyperpod=hyperpod)
    if operations is not None:
        # The workspace's alert manager names the operations topic: created after it, never before.
        addons.add_stack_dependency(operations)
    stacks.append(addons)
    if addons.prometheus is not None:
        # An operations stack deployed before the alert rules moved beside the workspace imports
        # it until its next update (which comes before this stack's): exported even when it is off.
        addons.keep_exported(addons.prometheus.attr_arn)
    # What the optional stack below imports, exported even when it is off.
    cluster.keep_exported(
        cluster.cluster.cluster_arn,
        cluster.cluster.cluster_name,
        cluster.cluster.kubectl_provider.service_token,
        cluster.bucket_key.key_arn,
        cluster.access_logs.bucket_name,
    )
    if not settings.uses_existing_cluster:
        # The accelerator gate's API address, exported even where no group waits for GPUs at
        # deploy (Karpenter at zero): turning Karpenter on must not drop an export the deployed
        # gate still imports. An existing cluster's gate asks DescribeCluster instead.
        cluster.keep_exported(cluster.cluster.cluster_endpoint, cluster.cluster.cluster_certificate_authority_data)
    if settings.sample_job.enabled:
        stacks.append(SampleJobStack(scope, settings=settings, cluster=cluster, after=addons))
    if not cluster.chart_prepared:
        stop_deploy_without_chart(stacks, settings)
    compliance.adopt_log_groups(
        stacks, network.logs_key, settings.protection.log_retention_days, network.data_removal_policy
    )
    # Whether the region offers these types is preflight's question (DescribeType), not CDK's snapshot's.
    compliance.acknowledge_regional_snapshots(stacks, settings.regional_resource_types)
    for stack in stacks:
        keep_app_logical_ids(stack)  # nothing where `scope` is the App
        if settings.protection.permissions_boundary:
            # On every role and user, aws-cdk-lib's own included (an aspect over each AWS::IAM::Role and User).
            boundary = iam.ManagedPolicy.from_managed_policy_name(stack, "PermissionsBoundary", settings.protection.permissions_boundary)
            iam.PermissionsBoundary.of(stack).apply(boundary)
    return stacks
