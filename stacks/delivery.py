"""The delivery stack: a CDK Pipelines pipeline that deploys the environments of `delivery.waves`
in order, each through the same composition as a hand deploy (stacks/environment.py) in a Stage.

Before each stage, in order: `validate`; the review against what that environment has deployed
(a refusal stops the stage); `preflight`, read-only, in the target account; then, for a protected
environment, a person's approval. The review and preflight run under the target's CDK bootstrap
lookup role (`cdk-hnb659fds-lookup-role-<account>-<region>`, read-only: the bootstrap template
gives it ReadOnlyAccess and denies kms:Decrypt), which `cdk bootstrap --trust` lets the
pipeline's account assume. No step after a stage: `hyperpod-cdk accept` needs kubectl
access that the pipeline's roles do not have (docs/delivery.md, After a stage).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import pipelines
from constructs import Construct

from infra import compliance, naming
from infra.config import Settings
from infra.stack import PlatformStack
from stacks.environment import compose

ROOT = Path(__file__).resolve().parent.parent
# The CDK bootstrap's qualifier: its roles' names carry it (the bootstrap template's default).
QUALIFIER = "hnb659fds"
# Helm, for `make hyperpod-chart` (helm dependency build), installed by helm's own script at its
# release tag, which checks the release's SHA-256 before installing it: only where the image has none.
HELM_VERSION = "v3.17.3"
INSTALL_HELM = (
    f"command -v helm || curl -fsSL https://raw.githubusercontent.com/helm/helm/{HELM_VERSION}/scripts/get-helm-3 "
    f"| DESIRED_VERSION={HELM_VERSION} bash"
)


def cdk_cli_version() -> str:
    """The CDK CLI package.json pins: what the pipeline's self-mutation and asset jobs install."""
    return json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]


def lookup_role_arn(settings: Settings) -> str:
    """The target environment's CDK bootstrap lookup role (read-only)."""
    return (f"arn:{naming.partition(settings.region)}:iam::{settings.account}:role/"
            f"cdk-{QUALIFIER}-lookup-role-{settings.account}-{settings.region}")


def assume_lookup_role(settings: Settings, purpose: str) -> list[str]:
    """Shell lines that put the lookup role's credentials in this build's environment (buildspec
    0.2 runs a phase's commands in one shell, so the exports hold for the lines after them)."""
    role, session = lookup_role_arn(settings), f"hyperpod-{purpose}-{settings.env_name}"
    return [
        f"creds=$(aws sts assume-role --role-arn {role} --role-session-name {session} "
        "--query 'Credentials.[AccessKeyId,SecretAccessKey,SessionToken]' --output text)",
        'export AWS_ACCESS_KEY_ID=$(echo "$creds" | cut -f1) AWS_SECRET_ACCESS_KEY=$(echo "$creds" | cut -f2) '
        'AWS_SESSION_TOKEN=$(echo "$creds" | cut -f3)',
        f"export AWS_REGION={settings.region} AWS_DEFAULT_REGION={settings.region}",
    ]


def validate_commands(settings: Settings) -> list[str]:
    return [f".venv/bin/hyperpod-cdk validate -c env={settings.env_name}"]


def review_commands(settings: Settings, stack_names: list[str]) -> list[str]:
    """The review against the templates the environment has deployed (aws cloudformation
    get-template; a stack not yet deployed is reviewed as a first deploy). Its exit status is the
    review's: a refusal fails the step, and the stage after it does not start."""
    fetch = (
        'mkdir -p deployed && against="" && for stack in ' + " ".join(shlex.quote(n) for n in stack_names) + "; do "
        'if aws cloudformation get-template --stack-name "$stack" --query TemplateBody --output json '
        '> "deployed/$stack.json" 2> deployed/error; then against="$against --against $stack=deployed/$stack.json"; '
        'elif grep -q "does not exist" deployed/error; then rm -f "deployed/$stack.json"; '
        "else cat deployed/error; exit 1; fi; done"
    )
    return [
        *assume_lookup_role(settings, "review"),
        fetch,
        f".venv/bin/hyperpod-cdk review --env {settings.env_name} $against --outdir review",
    ]


def preflight_commands(settings: Settings) -> list[str]:
    return [*assume_lookup_role(settings, "preflight"), f".venv/bin/hyperpod-cdk preflight -c env={settings.env_name}"]


def synth_commands(home: Settings, waves: tuple[tuple[Settings, ...], ...]) -> tuple[list[str], list[str]]:
    """(install, build) of the pipeline's synth: the README's set-up, the HyperPod chart of every
    environment the pipeline deploys (one fetch per chart revision), then `cdk synth` of the
    environment that holds the delivery block, which builds this stack and every stage."""
    charts: dict[str, str] = {}
    for s in (s for wave in waves for s in wave):
        charts.setdefault(s.hyperpod.helm_chart.revision, s.env_name)
    return (
        [INSTALL_HELM, "make install-synth"],
        [*(f"make hyperpod-chart ENV={env}" for env in charts.values()), f"bin/cdk synth --quiet -c env={home.env_name}"],
    )


class DeliveryStack(PlatformStack):
    """The pipeline, in the delivery block's account and region (default: this environment's)."""

    def __init__(self, scope: Construct, *, settings: Settings, waves: tuple[tuple[Settings, ...], ...]):
        d = settings.delivery
        super().__init__(scope, "delivery", settings=settings, account=d.account, region=d.region,
                         description="CDK Pipelines: every environment of delivery.waves, in order")
        source = pipelines.CodePipelineSource.connection(d.source.repository, d.source.branch, connection_arn=d.source.connection_arn)
        install, build = synth_commands(settings, waves)
        # The artifact store as every bucket of ours is: versioned, access-logged, under a key of
        # this stack that the other accounts' deploy roles are granted (cross_account_keys).
        access_logs = self.access_log_bucket("AccessLogs")
        artifacts_key = self.data_key("ArtifactsKey", "delivery", "The pipeline's artifacts (source, cloud assembly)")
        self.artifacts = self.data_bucket("Artifacts", artifacts_key, access_logs, "artifacts/")
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=settings.stack_name("delivery"),
            artifact_bucket=self.artifacts,
            # Environments in other accounts read the artifacts through a KMS key they are granted.
            cross_account_keys=True,
            enable_key_rotation=True,  # the replication buckets' keys in the support stacks
            cli_version=cdk_cli_version(),
            # Every environment of the waves is synthesized in one process: more memory than the small default's 3 GB.
            synth=pipelines.CodeBuildStep("Synth", input=source, install_commands=install, commands=build,
                                          primary_output_directory="cdk.out",
                                          build_environment=codebuild.BuildEnvironment(compute_type=codebuild.ComputeType.MEDIUM)),
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=codebuild.LinuxBuildImage.STANDARD_7_0)
            ),
        )
        approve = d.approved(waves)
        self.stages: dict[str, cdk.Stage] = {}
        for i, wave in enumerate(waves, 1):
            target = self.pipeline.add_wave(f"wave-{i}") if len(wave) > 1 else self.pipeline
            for env in wave:
                # Under the App, not this stack: a Stage in a stack would take this stack's tags.
                stage = cdk.Stage(scope, env.env_name, env=cdk.Environment(account=env.account, region=env.region))
                stacks = compose(stage, env)
                self.stages[env.env_name] = stage
                checks = self._checks(env, [s.stack_name for s in stacks], source, approve=env.env_name in approve)
                target.add_stage(stage, pre=pipelines.Step.sequence(checks))
        self.pipeline.build_pipeline()  # now, so that what CDK Pipelines builds can be acknowledged below
        self._acknowledge_cdk_pipelines()
        self._skip_checkov_on_cdk_pipelines()
        # The replication bucket CodePipeline keeps in each other region, one support stack each.
        self.support_stacks = [support.stack for support in self.pipeline.pipeline.cross_region_support.values()]
        for support in self.pipeline.pipeline.cross_region_support.values():
            _acknowledge_replication_bucket(support.replication_bucket)
            compliance.acknowledge(
                self.pipeline, "CodePipeline's role writes the artifacts a stage in another region reads into that region's "
                "replication bucket (aws-cdk-lib's grant on the bucket's objects)",
                f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:s3:::{self.resolve(support.replication_bucket.bucket_name)}/*]")

    def _checks(self, env: Settings, stack_names: list[str], source, *, approve: bool) -> list[pipelines.Step]:
        lookup = [iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[lookup_role_arn(env)])]
        install = ["make install-synth"]
        steps: list[pipelines.Step] = [
            pipelines.CodeBuildStep(f"Validate-{env.env_name}", input=source, install_commands=install, commands=validate_commands(env)),
            pipelines.CodeBuildStep(f"Review-{env.env_name}", input=source, install_commands=install,
                                    commands=review_commands(env, stack_names), role_policy_statements=lookup),
            pipelines.CodeBuildStep(f"Preflight-{env.env_name}", input=source, install_commands=install,
                                    commands=preflight_commands(env), role_policy_statements=lookup),
        ]
        if approve:
            steps.append(pipelines.ManualApprovalStep(
                f"Approve-{env.env_name}",
                comment=f"Deploy {env.env_name} ({env.account}, {env.region})? Read the review step's output first."))
        return steps

    def _acknowledge_cdk_pipelines(self) -> None:
        """What CDK Pipelines grants its own roles, each finding by name: the artifact bucket and
        key (grantReadWrite), each CodeBuild project's log group and report groups, the asset
        jobs' CodeBuild calls, and self-mutation's bootstrap roles."""
        region, account = self.region, self.account
        projects = [c for c in self.pipeline.node.find_all() if isinstance(c, codebuild.CfnProject)]
        per_project = [
            finding
            for project in projects
            for lid in [self.resolve(self.get_logical_id(project))]
            for finding in (
                f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:codebuild:{region}:{account}:report-group/<{lid}>-*]",
                f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:logs:{region}:{account}:log-group:/aws/codebuild/<{lid}>:*]",
            )
        ]
        bucket = self.resolve(self.get_logical_id(self.artifacts.node.default_child))
        compliance.acknowledge(
            self.pipeline,
            "CDK Pipelines' grants to its own roles: read and write on the pipeline's artifact bucket and its key "
            "(bucket.grantReadWrite), each CodeBuild project's own log group and report groups, starting and watching the "
            "asset jobs' builds, DescribeStacks and ListBucket for self-mutation, and assuming only the CDK bootstrap roles "
            "(condition on their aws-cdk:bootstrap-role tag); inline policies, as aws-cdk-lib writes every grant",
            *(f"AwsSolutions-IAM5[Action::{a}]" for a in ("kms:GenerateDataKey*", "kms:ReEncrypt*", "s3:Abort*", "s3:DeleteObject*",
                                                          "s3:GetBucket*", "s3:GetObject*", "s3:List*")),
            f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/*]",
            "AwsSolutions-IAM5[Resource::*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:codebuild:{region}:{account}:report-group/*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:logs:{region}:{account}:log-group:/aws/codebuild/*]",
            f"AwsSolutions-IAM5[Resource::arn:*:iam::{account}:role/*]",
            *per_project,
            "NIST.800.53.R5-IAMNoInlinePolicy",
        )

    def _skip_checkov_on_cdk_pipelines(self) -> None:
        """checkov's CKV_AWS_111 (write without a resource constraint) on the grants aws-cdk-lib
        writes with `*`, each said where it is."""
        why = {
            "/Pipeline/Pipeline/Role/DefaultPolicy/Resource": (
                "CodePipeline's role (aws-cdk-lib): KMS encrypt and decrypt on '*' is its grant on the replication bucket's "
                "key in another region's support stack, which this stack cannot name; S3 and the other grants name their resources"),
            "/Pipeline/Assets/DockerRole/DefaultPolicy/Resource": (
                "CDK Pipelines' asset-publishing role: starts, stops and watches the CodeBuild builds of the asset jobs, "
                "which CodePipeline names only at run time"),
            "/Pipeline/Assets/FileRole/DefaultPolicy/Resource": (
                "CDK Pipelines' asset-publishing role: starts, stops and watches the CodeBuild builds of the asset jobs, "
                "which CodePipeline names only at run time"),
        }
        for policy in (c for c in self.pipeline.node.find_all() if isinstance(c, iam.CfnPolicy)):
            reason = next((r for suffix, r in why.items() if ("/" + policy.node.path).endswith(suffix)), None)
            if reason is not None:
                compliance.checkov_skip(policy, CKV_AWS_111=reason)


def _acknowledge_replication_bucket(bucket) -> None:
    """CodePipeline's replication bucket in another region (its support stack, made by aws-cdk-lib)."""
    reason = ("CodePipeline's cross-region replication bucket, created by aws-cdk-lib in its support stack: it holds only "
              "the artifacts a stage in this region reads, under the support stack's KMS key, and aws-cdk-lib offers no "
              "access logging or versioning for it")
    compliance.acknowledge(bucket, reason, "AwsSolutions-S1", "NIST.800.53.R5-S3BucketLoggingEnabled",
                           "NIST.800.53.R5-S3BucketReplicationEnabled", "NIST.800.53.R5-S3BucketVersioningEnabled")
    compliance.checkov_skip(bucket.node.default_child, CKV_AWS_18=reason, CKV_AWS_21=reason)
