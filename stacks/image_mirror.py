"""Copies of the dependencies chart's images in this account's ECR, for the cluster stack,
where the network has no way to the registries the chart pulls from (a closed network).

Nodes without a NAT reach only ECR in their own region (the ecr.api and ecr.dkr endpoints,
image layers through the S3 gateway endpoint); ECR's VPC endpoints do not serve public ECR,
and a pull-through cache needs a NAT for the first pull (ECR user guide, VPC endpoints). So
each image is copied at deploy, before the chart, by cdk-ecr-deployment (cdklabs), whose
copier runs outside the VPC. The whole image index is copied: GB200 hosts are arm64.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from infra import compliance, hyperpod_chart
from infra.config import Settings

# The copier holds each image's layers while it copies (cdk-ecr-deployment's default is 512).
COPIER_MEMORY_MB = 1024


def mirror_chart_images(stack: cdk.Stack, settings: Settings, values: dict, key: kms.IKey) -> list[Construct]:
    """A repository and a copy for every image the chart renders with `values`; what the
    chart must be installed after."""
    from cdk_ecr_deployment import DockerImageName, ECRDeployment

    role = iam.Role(
        stack,
        "ImageMirrorRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description="Copies the HyperPod chart's images into this environment's ECR repositories",
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole")],
    )
    # The construct adds ECR and S3 grants on "*" to a role it may change; given one it may
    # not, the grants are ours: push to these repositories, pull from the AWS-owned sources.
    copier_role = iam.Role.from_role_arn(stack, "ImageMirrorRoleRef", role.role_arn, mutable=False)
    secret = settings.hyperpod.helm_chart.docker_hub_secret
    rendered = hyperpod_chart.rendered_images(values, settings.region)
    copies: list[Construct] = []
    aws_sources = []
    for image in hyperpod_chart.CHART_IMAGES:
        if image.subchart not in rendered:
            continue
        source = image.upstream(settings.region)
        repository = ecr.Repository(
            stack,
            f"Mirror-{image.subchart}",
            repository_name=hyperpod_chart.mirror_name(settings, image),
            encryption=ecr.RepositoryEncryption.KMS,
            encryption_key=key,
            image_scan_on_push=True,
            # The copy re-runs when the chart's tag changes; the tag names the upstream version.
            image_tag_mutability=ecr.TagMutability.MUTABLE,
            # Deleted with the stack, so the next deploy copies again (with credentials where the
            # registry limits anonymous pulls: config refuses a copy from one without them). Kept,
            # its fixed name would fail that deploy's create, as the kept buckets do.
            removal_policy=cdk.RemovalPolicy.DESTROY,
            empty_on_delete=True,
        )
        compliance.checkov_skip(
            repository.node.default_child,
            CKV_AWS_51="A mirror: each tag is the upstream release the chart pins, copied again only when that changes",
        )
        repository.grant_pull_push(role)
        if ".dkr.ecr." in source:
            aws_sources.append(source)
        copy = ECRDeployment(
            stack,
            f"Copy-{image.subchart}",
            src=DockerImageName(source, secret if secret and source.startswith(hyperpod_chart.DOCKER_HUB) else None),
            dest=DockerImageName(f"{repository.repository_uri}:{image.tag}"),
            copy_image_index=True,
            role=copier_role,
            memory_limit=COPIER_MEMORY_MB,
        )
        copy.node.add_dependency(role)
        copies.append(copy)
    copier = next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKECRDeployment"))
    compliance.acknowledge(
        copier,
        "cdk-ecr-deployment's copier, a Lambda its construct builds: it must run outside the VPC to reach the public "
        "registries the chart pulls from (which is why it exists), CloudFormation invokes it once per image per deploy "
        "and receives its failures",
        "NIST.800.53.R5-LambdaConcurrency",
        "NIST.800.53.R5-LambdaDLQ",
        "NIST.800.53.R5-LambdaInsideVPC",
    )
    if aws_sources:
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PullAwsOwnedSources",
                actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                resources=[_repository_arn(stack, s) for s in sorted(aws_sources)],
            )
        )
    if secret:
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DockerHubCredentials",
                actions=["secretsmanager:GetSecretValue"],
                # Secrets Manager appends six random characters to a secret's ARN.
                resources=[f"arn:{stack.partition}:secretsmanager:{stack.region}:{stack.account}:secret:{secret}-??????"],
            )
        )
    compliance.acknowledge(
        role,
        "cdk-ecr-deployment's copier is a Lambda of its own: the AWS-managed basic execution policy for its logs, "
        "ecr:GetAuthorizationToken (no resource-level scoping) and push/pull on this environment's mirror repositories only",
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "AwsSolutions-IAM5[Resource::*]",
        "NIST.800.53.R5-IAMNoInlinePolicy",
        *(
            [f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:{stack.region}:{stack.account}:secret:{secret}-??????]"]
            if secret
            else []
        ),
    )
    return copies


def _repository_arn(stack: cdk.Stack, image: str) -> str:
    """arn:...:ecr:<region>:<account>:repository/<path> of an image in an AWS-owned registry."""
    registry, path = image.rsplit(":", 1)[0].split("/", 1)
    account, _, _, region = registry.split(".")[:4]
    return f"arn:{stack.partition}:ecr:{region}:{account}:repository/{path}"
