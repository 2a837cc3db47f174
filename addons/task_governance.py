"""HyperPod task governance (`amazon-sagemaker-hyperpod-taskgovernance`): Kueue in
kueue-system, then the cluster's scheduler policy and one compute quota per team.

The scheduler config and the quotas become Kueue objects, so they wait until Kueue's
webhook answers (a ClusterSchedulerConfig created earlier ends in CreateFailed). They are
built with the add-on, in the addons stack, so they run beside cert-manager and the
training operator instead of after them; each team's namespace, which task governance
creates after its quota, is waited for here too, before anything is applied into it.
"""

from __future__ import annotations

import re

from typing import TYPE_CHECKING

from addons.base import AddonContext, ManagedAddon, ReadyWhen
from infra import lazy, naming
from infra.config import Settings, Team

if TYPE_CHECKING:
    from constructs import IConstruct

cdk = lazy.module("aws_cdk")
sagemaker = lazy.module("aws_cdk.aws_sagemaker")
readiness = lazy.module("infra.readiness")



def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def quota_name(settings: Settings, team: str) -> str:
    return f"{settings.prefix}-{settings.env_name}-{team}"


def quota_properties(settings: Settings, team: Team, cluster_arn: str) -> dict:
    """CloudFormation properties of a team's AWS::SageMaker::ComputeQuota."""
    sharing = {"Strategy": team.sharing}
    if team.borrow_limit is not None:
        sharing["BorrowLimit"] = team.borrow_limit
    resources = []
    for q in team.quotas:
        entry = {"InstanceType": q.instance_type}
        entry.update({"Count": q.count} if q.count is not None else {"Accelerators": q.accelerators})
        resources.append(entry)
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


class TaskGovernanceAddon(ManagedAddon):
    key = "task_governance"
    title = "HyperPod task governance (Kueue)"
    eks_name = "amazon-sagemaker-hyperpod-taskgovernance"
    # Kueue's webhook is served by this deployment; the awsome Terraform waits for the same.
    ready_when = ReadyWhen.deployment_available("kueue-system", "kueue-controller-manager")

    def build(self, ctx: AddonContext, after: list[IConstruct]) -> IConstruct:
        kueue = super().build(ctx, after)
        scheduler = self._scheduler_config(ctx)
        scheduler.node.add_dependency(kueue)
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
            cdk.CfnOutput(ctx.scope, f"Queue-{team.name}", value=f"{names.namespace}/{names.local_queue}")
        # The training operator follows Kueue, not the quotas.
        return kueue

    def _scheduler_config(self, ctx: AddonContext) -> sagemaker.CfnClusterSchedulerConfig:
        settings, gov = self.settings, self.settings.governance
        return sagemaker.CfnClusterSchedulerConfig(
            ctx.scope,
            "SchedulerConfig",
            name=f"{settings.prefix}-{settings.env_name}-scheduler",
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
        cdk.Validations.of(quota).acknowledge(
            cdk.Acknowledgment(
                id="CloudFormation-Validate::F3006",
                reason="CDK's bundled schemas predate AWS::SageMaker::ComputeQuota; cfn-lint's, which the review runs, have it",
            )
        )
        return quota


def _snake(value):
    """CloudFormation-cased properties as the keyword arguments an L1 takes (deep)."""
    if isinstance(value, list):
        return [_snake(v) for v in value]
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in value.items()}
    return value
