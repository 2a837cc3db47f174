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


def acknowledge_eks_internals(cluster) -> None:
    """Findings on constructs aws_eks_v2 builds for us, each with why it stays."""
    acknowledge(
        cluster.role,
        "EKS requires the AWS-managed AmazonEKSClusterPolicy on the cluster service role",
        f"AwsSolutions-IAM4[{_MANAGED}AmazonEKSClusterPolicy]",
    )
    provider = cluster.node.find_child("KubectlProvider")
    handler_id = cdk.Stack.of(cluster).get_logical_id(provider.node.find_child("Handler").node.default_child)
    ecr_public_condition = provider.node.find_child("Handler").node.find_child("HasEcrPublic")
    condition_id = cdk.Stack.of(cluster).get_logical_id(ecr_public_condition)
    ecr_public = (
        '{"Fn::If":["' + condition_id + '",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},'
        '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
    )
    acknowledge(
        provider,
        "kubectl provider Lambda built by aws_eks_v2: it ships the AWS-managed Lambda execution, VPC access "
        "and ECR read-only policies, an inline invoke policy, and the runtime CDK pins to its bundled kubectl",
        f"AwsSolutions-IAM4[{_MANAGED}service-role/AWSLambdaBasicExecutionRole]",
        f"AwsSolutions-IAM4[{_MANAGED}service-role/AWSLambdaVPCAccessExecutionRole]",
        f"AwsSolutions-IAM4[{_MANAGED}AmazonEC2ContainerRegistryReadOnly]",
        f"AwsSolutions-IAM4[Policy::{ecr_public}]",
        f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]",
        "AwsSolutions-L1",
        "NIST.800.53.R5-IAMNoInlinePolicy",
        "NIST.800.53.R5-LambdaConcurrency",
        "NIST.800.53.R5-LambdaDLQ",
    )
