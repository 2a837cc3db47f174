"""`<prefix>-<env>-governance`: the cluster's scheduler policy and one compute quota per team.

Both need the task-governance add-on to be active: a ClusterSchedulerConfig created
earlier ends in CreateFailed. So the stack waits for the addons stack, and every resource
here waits for the add-on itself.
"""

from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from addons.task_governance import TaskGovernanceAddon
from infra import naming
from infra.config import Settings, Team
from infra.stack import PlatformStack
from stacks.addons import AddonsStack
from stacks.hyperpod import HyperPodStack

# aws-cdk-lib 2.275 has no L1 for AWS::SageMaker::ComputeQuota (cfn-lint's schemas do);
# use the L1 once the installed library ships it. One code path, chosen here, once.
_CfnComputeQuota = getattr(sagemaker, "CfnComputeQuota", None)


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


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


def quota_name(settings: Settings, team: str) -> str:
    return f"{settings.prefix}-{settings.env_name}-{team}"


class GovernanceStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings, hyperpod: HyperPodStack, addons: AddonsStack):
        super().__init__(scope, "governance", settings=settings, description="HyperPod task governance: scheduler policy and team quotas")
        self.add_stack_dependency(addons)
        task_governance = addons.built[TaskGovernanceAddon]
        cluster_arn = hyperpod.cluster.attr_cluster_arn
        gov = settings.governance
        self.scheduler_config = sagemaker.CfnClusterSchedulerConfig(
            self,
            "SchedulerConfig",
            name=f"{settings.prefix}-{settings.env_name}-scheduler",
            cluster_arn=cluster_arn,
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=[
                    sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(name=pc.name, weight=pc.weight)
                    for pc in gov.priority_classes
                ],
                fair_share=_enabled(gov.fair_share),
                idle_resource_sharing=_enabled(gov.idle_resource_sharing),
            ),
        )
        self.scheduler_config.node.add_dependency(task_governance)
        self.quotas = {}
        for team in gov.teams:
            props = quota_properties(settings, team, cluster_arn)
            id_ = f"Quota-{team.name}"  # keyed by team, so reordering teams replaces nothing
            if _CfnComputeQuota is not None:  # pragma: no cover - newer aws-cdk-lib
                quota = _CfnComputeQuota(self, id_, **_snake(props))
            else:
                quota = cdk.CfnResource(self, id_, type="AWS::SageMaker::ComputeQuota", properties=props)
            # Quotas are admitted against the scheduler's priority classes and fair share.
            quota.node.add_dependency(task_governance, self.scheduler_config)
            self.quotas[team.name] = quota
            names = naming.team_names(team.name)
            cdk.CfnOutput(self, f"Queue-{team.name}", value=f"{names.namespace}/{names.local_queue}")


def _snake(value):
    """CloudFormation-cased properties as the keyword arguments an L1 takes (deep)."""
    if isinstance(value, list):
        return [_snake(v) for v in value]
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in value.items()}
    return value
