"""cdk-nag packs and the one-line acknowledgment helper.

cdk-nag 3 packs are CDK policy-validation plugins: they run at synth and write
`cdk.out/validation-report.json`. An acknowledgment is scoped to one construct and must
say why the finding is acceptable there; `acknowledge` refuses an empty reason.
"""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks
from constructs import IConstruct

def packs() -> list:
    return [AwsSolutionsChecks(), NIST80053R5Checks()]


def add_packs(app: cdk.App) -> None:
    cdk.Validations.of(app).add_plugins(*packs())


def acknowledge(construct: IConstruct, reason: str, *rules: str) -> None:
    """Acknowledge nag `rules` (e.g. "AwsSolutions-IAM4", "NIST.800.53.R5-IAMNoInlinePolicy",
    optionally with a finding suffix like "AwsSolutions-IAM5[Resource::*]") on `construct`."""
    if len(reason.strip()) < 20:
        raise ValueError(f"acknowledgment of {rules} on {construct.node.path} needs a specific reason")
    acks = []
    for rule in rules:
        pack = rule.split("-", 1)[0] if rule.startswith("AwsSolutions") else "NIST.800.53.R5"
        acks.append(cdk.Acknowledgment(id=f"{pack}::{rule}", reason=reason))
    cdk.Validations.of(construct).acknowledge(*acks)


_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/"

# What every Lambda that aws-cdk-lib builds for a custom resource brings along.
_CDK_LAMBDA = (
    f"AwsSolutions-IAM4[{_MANAGED}service-role/AWSLambdaBasicExecutionRole]",
    "AwsSolutions-L1",
    "NIST.800.53.R5-IAMNoInlinePolicy",
    "NIST.800.53.R5-LambdaConcurrency",
    "NIST.800.53.R5-LambdaDLQ",
)


def cdk_asset_read(stack: cdk.Stack) -> tuple[str, ...]:
    """The wildcard findings of CDK's grant to read this stack's file assets."""
    return (
        "AwsSolutions-IAM5[Action::s3:GetBucket*]",
        "AwsSolutions-IAM5[Action::s3:GetObject*]",
        "AwsSolutions-IAM5[Action::s3:List*]",
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-{stack.account}-{stack.region}/*]",
    )


def acknowledge_cdk_lambda(construct: IConstruct, what: str, *extra_rules: str) -> None:
    """A custom-resource Lambda that aws-cdk-lib builds and pins; `what` says which and why."""
    acknowledge(
        construct,
        f"{what}; built by aws-cdk-lib, which pins its runtime and attaches the AWS-managed basic "
        "execution policy and inline grants; we cannot change its function settings",
        *_CDK_LAMBDA,
        *extra_rules,
    )


def acknowledge_eks_internals(cluster) -> None:
    """Findings on constructs aws_eks_v2 builds for us, each with why it stays."""
    stack = cdk.Stack.of(cluster)
    acknowledge(
        cluster.role,
        "EKS requires the AWS-managed AmazonEKSClusterPolicy on the cluster service role",
        f"AwsSolutions-IAM4[{_MANAGED}AmazonEKSClusterPolicy]",
    )
    provider = cluster.node.find_child("KubectlProvider")
    handler = provider.node.find_child("Handler")
    handler_id = stack.get_logical_id(handler.node.default_child)
    condition_id = stack.get_logical_id(handler.node.find_child("HasEcrPublic"))
    ecr_public = (
        '{"Fn::If":["' + condition_id + '",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},'
        '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
    )
    acknowledge_cdk_lambda(
        provider,
        "The kubectl provider of aws_eks_v2 (runs kubectl and helm in the VPC); it needs VPC access, "
        "ECR read-only for chart images and read of the chart assets",
        f"AwsSolutions-IAM4[{_MANAGED}service-role/AWSLambdaVPCAccessExecutionRole]",
        f"AwsSolutions-IAM4[{_MANAGED}AmazonEC2ContainerRegistryReadOnly]",
        f"AwsSolutions-IAM4[Policy::{ecr_public}]",
        f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]",
        *cdk_asset_read(stack),
    )
