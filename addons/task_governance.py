"""HyperPod task governance (`amazon-sagemaker-hyperpod-taskgovernance`): Kueue in
kueue-system, then the cluster's scheduler policy and one compute quota per team.

The scheduler config and the quotas become Kueue objects, so they wait until Kueue's
webhook answers (a ClusterSchedulerConfig created earlier ends in CreateFailed). They are
built with the add-on, in the addons stack, so they run beside cert-manager and the
training operator instead of after them; each team's namespace, which task governance
creates after its quota, is waited for here too, before anything is applied into it.
"""

from __future__ import annotations

import json
import re

from typing import TYPE_CHECKING

from addons.base import AddonContext, ManagedAddon, ReadyWhen
from infra import lazy, naming
from infra.config import EKS_ADDON_NAMES, QuotaResource, Settings, Team
from infra.checks.governance import queue_label_enforced

if TYPE_CHECKING:
    from constructs import IConstruct

cdk = lazy.module("aws_cdk")
sagemaker = lazy.module("aws_cdk.aws_sagemaker")
eks = lazy.module("aws_cdk.aws_eks_v2")
teams = lazy.module("manifests.teams")
tenancy = lazy.module("manifests.tenancy")
endpoint_manifest = lazy.module("manifests.endpoint")
readiness = lazy.module("infra.readiness")
compliance = lazy.module("infra.compliance")



def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def quota_name(settings: Settings, team: str) -> str:
    return f"{settings.prefix}-{settings.env_name}-{team}"


def quota_properties(settings: Settings, team: Team, cluster_arn: str) -> dict:
    """CloudFormation properties of a team's AWS::SageMaker::ComputeQuota."""
    sharing = {"Strategy": team.sharing}
    if team.borrow_limit is not None:
        sharing["BorrowLimit"] = team.borrow_limit
    if team.absolute_borrow_limits:
        sharing["AbsoluteBorrowLimits"] = [_resource(q) for q in team.absolute_borrow_limits]
    resources = [_resource(q) for q in team.quotas]
    return {
        "Name": quota_name(settings, team.name),
        "Description": f"Compute quota of team {team.name} ({settings.env_name})",
        "ClusterArn": cluster_arn,
        "ActivationState": _enabled(team.active),
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": resources,
            "ResourceSharingConfig": sharing,
            "PreemptTeamTasks": team.preempt,
        },
        "ComputeQuotaTarget": {"TeamName": team.name, "FairShareWeight": team.fair_share_weight},
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(settings.all_tags.items())],
    }


# Config field -> ComputeQuotaResourceConfig property; every one the schema has (a test holds
# this against cfn-lint's schema).
RESOURCE_FIELDS = {
    "instance_type": "InstanceType",
    "count": "Count",
    "accelerators": "Accelerators",
    "vcpu": "VCpu",
    "memory_gib": "MemoryInGiB",
    "accelerator_partition": "AcceleratorPartition",
}


# Every property of AWS::SageMaker::ComputeQuota and AWS::SageMaker::ClusterSchedulerConfig in
# cfn-lint's schemas (dotted through nested objects): the config it comes from, or in LEFT_OUT
# why nothing sets it. A test walks the schemas and the synthesized templates against these.
QUOTA_COVERAGE = {
    "Name": "prefix, environment and governance.teams[].name",
    "Description": "governance.teams[].name and the environment",
    "ClusterArn": "the HyperPod cluster",
    "ActivationState": "governance.teams[].active",
    "ComputeQuotaConfig.ComputeQuotaResources": "governance.teams[].quotas",
    **{f"ComputeQuotaConfig.ComputeQuotaResources.{prop}": f"governance.teams[].quotas[].{field}" for field, prop in RESOURCE_FIELDS.items()},
    "ComputeQuotaConfig.ComputeQuotaResources.AcceleratorPartition.Type": "governance.teams[].quotas[].accelerator_partition.type",
    "ComputeQuotaConfig.ComputeQuotaResources.AcceleratorPartition.Count": "governance.teams[].quotas[].accelerator_partition.count",
    "ComputeQuotaConfig.ResourceSharingConfig": "governance.teams[].sharing",
    "ComputeQuotaConfig.ResourceSharingConfig.Strategy": "governance.teams[].sharing",
    "ComputeQuotaConfig.ResourceSharingConfig.BorrowLimit": "governance.teams[].borrow_limit",
    "ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits": "governance.teams[].absolute_borrow_limits",
    **{
        f"ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits.{prop}": f"governance.teams[].absolute_borrow_limits[].{field}"
        for field, prop in RESOURCE_FIELDS.items()
    },
    "ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits.AcceleratorPartition.Type": "absolute_borrow_limits[].accelerator_partition.type",
    "ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits.AcceleratorPartition.Count": "absolute_borrow_limits[].accelerator_partition.count",
    "ComputeQuotaConfig.PreemptTeamTasks": "governance.teams[].preempt",
    "ComputeQuotaConfig": "governance.teams[]",
    "ComputeQuotaTarget": "governance.teams[]",
    "ComputeQuotaTarget.TeamName": "governance.teams[].name",
    "ComputeQuotaTarget.FairShareWeight": "governance.teams[].fair_share_weight",
    "Tags": "tags",
}
SCHEDULER_COVERAGE = {
    "Name": "prefix and environment",
    "Description": "the environment",
    "ClusterArn": "the HyperPod cluster",
    "SchedulerConfig": "governance",
    "SchedulerConfig.PriorityClasses": "governance.priority_classes",
    "SchedulerConfig.PriorityClasses.Name": "governance.priority_classes[].name",
    "SchedulerConfig.PriorityClasses.Weight": "governance.priority_classes[].weight",
    "SchedulerConfig.FairShare": "governance.fair_share",
    "SchedulerConfig.IdleResourceSharing": "governance.idle_resource_sharing",
    "Tags": "tags",
}
# Read-only: what the service reports back, which no template sets.
LEFT_OUT = {
    "ComputeQuotaArn": "read-only", "ComputeQuotaId": "read-only", "ComputeQuotaVersion": "read-only", "Status": "read-only",
    "CreationTime": "read-only", "LastModifiedTime": "read-only", "ClusterSchedulerConfigArn": "read-only",
    "ClusterSchedulerConfigId": "read-only", "ClusterSchedulerConfigVersion": "read-only",
}


def _resource(q: QuotaResource) -> dict:
    """A quota entry as ComputeQuotaResourceConfig: only what config sets (SageMaker fills in
    the rest in proportion)."""
    out = {}
    for field, prop in RESOURCE_FIELDS.items():
        value = getattr(q, field)
        if value is None:
            continue
        if field == "accelerator_partition":
            value = {"Type": value.type, "Count": value.count}
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        out[prop] = value
    return out


class TaskGovernanceAddon(ManagedAddon):
    key = "task_governance"
    title = "HyperPod task governance (Kueue)"
    eks_name = EKS_ADDON_NAMES["task_governance"]
    # Kueue's webhook is served by this deployment; the awsome Terraform waits for the same.
    ready_when = ReadyWhen.deployment_available("kueue-system", "kueue-controller-manager")

    def build(self, ctx: AddonContext, after: list[IConstruct]) -> IConstruct:
        kueue = super().build(ctx, after)
        scheduler = self._scheduler_config(ctx)
        scheduler.node.add_dependency(kueue)
        # Cluster-wide objects naming the team namespaces and groups, which need not exist yet;
        # made first, because the teams' Roles grant what they hold (a Role applied before them
        # would grant it unheld until they are).
        policies = None
        queue_policy = tenancy.queue_label_policy(self.settings)
        if queue_policy:
            policies = eks.KubernetesManifest(ctx.scope, "TeamQueueLabelPolicy", cluster=ctx.cluster, manifest=queue_policy)
            policies.node.add_dependency(kueue)
        for team in self.settings.governance.teams:
            quota = self._quota(ctx, team)
            # Quotas are admitted against the scheduler's priority classes and fair share.
            quota.node.add_dependency(scheduler)
            names = naming.team_names(team.name)
            namespace = readiness.kubernetes_ready(
                ctx.scope,
                f"Namespace-{team.name}",
                cluster=ctx.cluster,
                kind="namespace",
                name=names.namespace,
                namespace="default",
                json_path=".status.phase",
                minutes=10,
            )
            namespace.node.add_dependency(quota)
            self._tenant_isolation(ctx, team, namespace)
            if team.principals:
                self._team_access(ctx, team, namespace, policies)
            cdk.CfnOutput(ctx.scope, f"Queue-{team.name}", value=f"{names.namespace}/{names.local_queue}")
        # The training operator follows Kueue, not the quotas.
        return kueue

    def _tenant_isolation(self, ctx: AddonContext, team: Team, namespace: IConstruct) -> None:
        """Pod Security labels on the namespace task governance made (a merge patch: the
        namespace stays the add-on's, see manifests/tenancy.py) and its default-deny ingress."""
        names = naming.team_names(team.name)
        apply, restore = tenancy.namespace_patch(team)
        labels = eks.KubernetesPatch(
            ctx.scope,
            f"PodSecurity-{team.name}",
            cluster=ctx.cluster,
            resource_name=f"namespace/{names.namespace}",
            apply_patch=apply,
            restore_patch=restore,
            patch_type=eks.PatchType.MERGE,
        )
        # A merge patch removes a label by setting it to null, and jsii drops the None values of
        # a mapping on its way to CDK's toJsonString: the restore patch goes in as JSON text.
        labels.node.find_child("Resource").node.default_child.add_property_override("RestorePatchJson", json.dumps(restore))
        manifest = [tenancy.isolation_policy(team.name), tenancy.egress_policy(team.name)]
        opening = endpoint_manifest.opening(self.settings)
        if opening is not None and opening["metadata"]["namespace"] == names.namespace:
            manifest.append(opening)
        policy = eks.KubernetesManifest(ctx.scope, f"Isolation-{team.name}", cluster=ctx.cluster, manifest=manifest)
        for construct in (labels, policy):
            construct.node.add_dependency(namespace)

    def _team_access(self, ctx: AddonContext, team: Team, namespace: IConstruct, policies: IConstruct | None) -> None:
        """The team's people into its namespace: an access entry per IAM role, mapped to the
        team's Kubernetes group and no EKS access policy (those grant by namespace scope, not
        by resource: the team's Role decides), and that group's Role and ClusterRole."""
        names = naming.team_names(team.name)
        # Patching Workloads only where the policy holds it to spec.active (manifests/tenancy.py).
        stop = queue_label_enforced(self.settings)
        roles = eks.KubernetesManifest(ctx.scope, f"Roles-{team.name}", cluster=ctx.cluster, manifest=teams.rbac(team.name, stop_workloads=stop))
        roles.node.add_dependency(namespace)
        if policies is not None:
            roles.node.add_dependency(policies)
        for arn in team.principals:
            eks.CfnAccessEntry(
                ctx.scope,
                naming.team_entry_id(team.name, arn),
                cluster_name=ctx.cluster.cluster_name,
                principal_arn=arn,
                kubernetes_groups=[names.group],
                type="STANDARD",
            )

    def _scheduler_config(self, ctx: AddonContext) -> sagemaker.CfnClusterSchedulerConfig:
        settings, gov = self.settings, self.settings.governance
        return sagemaker.CfnClusterSchedulerConfig(
            ctx.scope,
            "SchedulerConfig",
            name=f"{settings.prefix}-{settings.env_name}-scheduler",
            description=f"Priority classes and fair share of the {settings.env_name} HyperPod cluster",
            cluster_arn=ctx.hyperpod_cluster_arn,
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=[
                    sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(name=pc.name, weight=pc.weight)
                    for pc in gov.priority_classes
                ],
                fair_share=_enabled(gov.fair_share),
                idle_resource_sharing=_enabled(gov.idle_resource_sharing),
            ),
        )

    def _quota(self, ctx: AddonContext, team: Team) -> cdk.CfnResource:
        props = quota_properties(self.settings, team, ctx.hyperpod_cluster_arn)
        id_ = f"Quota-{team.name}"  # keyed by team, so reordering teams replaces nothing
        # aws-cdk-lib 2.275 has no L1 for AWS::SageMaker::ComputeQuota (cfn-lint's schemas
        # do); the L1 is used once the installed library ships it.
        l1 = getattr(sagemaker, "CfnComputeQuota", None)
        if l1 is not None:  # pragma: no cover - newer aws-cdk-lib
            return l1(ctx.scope, id_, **_snake(props))
        quota = cdk.CfnResource(ctx.scope, id_, type="AWS::SageMaker::ComputeQuota", properties=props)
        compliance.acknowledge_newer_schema(quota, "F3006", "the resource type AWS::SageMaker::ComputeQuota", "AWS::SageMaker::ComputeQuota")
        return quota


def _snake(value):
    """CloudFormation-cased properties as the keyword arguments an L1 takes (deep)."""
    if isinstance(value, list):
        return [_snake(v) for v in value]
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in value.items()}
    return value
