"""The delivery stack: a CDK Pipelines pipeline that deploys the environments of `delivery.waves`
in order, each through the same composition as a hand deploy (stacks/environment.py) in a Stage.

Before each stage, in order: `validate`; the review of the very assembly the stage deploys (the
Synth step's `assembly-<env>/`, handed to the step as an input) against what that environment has
deployed (a refusal stops the stage; its files are kept in the reviews bucket and linked from the
approval); `preflight`, read-only, in the target account, with the review's deploy plan; then, for
a protected environment, a person's approval. The review and preflight run under the target's CDK
bootstrap lookup role (`cdk-hnb659fds-lookup-role-<account>-<region>`, read-only: the bootstrap
template gives it ReadOnlyAccess and denies kms:Decrypt), which `cdk bootstrap --trust` lets the
pipeline's account assume. After the stage, where the assembly gives its stacks termination
protection, a step sets it under the target's deploy role: CDK Pipelines' CloudFormation actions
ignore it (aws/aws-cdk#17871, #30405). No `hyperpod-cdk accept` after a stage: it needs kubectl
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


# Where a step finds the Synth step's cloud assembly (an additional input), and where the review
# step writes its files (its output, which preflight reads in turn as its cdk.out).
ASSEMBLY_DIR = "cdk.out"
REVIEW_DIR = "review"
# The asset jobs build the training image FROM an AWS Deep Learning Container of about 20 GB and push
# it to every environment's ECR: CodeBuild's general1.large (8 vCPUs, 15 GB of memory, 128 GB of disk;
# small has 64 GB: CodeBuild User Guide, "Build environment compute modes and types"), for at most
# four hours (CodeBuild's default is one; its most 36: FACTS, Delivery).
ASSET_COMPUTE = codebuild.ComputeType.LARGE
ASSET_TIMEOUT_HOURS = 4


def npm_pin(package: str) -> str:
    """The version package-lock.json locks for an npm package of package.json (npm ci checks its
    integrity): the CDK CLI that self-mutation installs, and the asset jobs' cdk-assets."""
    return json.loads((ROOT / "package-lock.json").read_text())["packages"][f"node_modules/{package}"]["version"]


def cdk_cli_version() -> str:
    """The CDK CLI package.json pins: what the pipeline's self-mutation installs."""
    return json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]


def bootstrap_role_arn(settings: Settings, kind: str) -> str:
    """One of the target environment's CDK bootstrap roles: `lookup` (read-only) or `deploy`."""
    return (f"arn:{naming.partition(settings.region)}:iam::{settings.account}:role/"
            f"cdk-{QUALIFIER}-{kind}-role-{settings.account}-{settings.region}")


def lookup_role_arn(settings: Settings) -> str:
    """The target environment's CDK bootstrap lookup role (read-only)."""
    return bootstrap_role_arn(settings, "lookup")


def assume_role(settings: Settings, kind: str, purpose: str) -> list[str]:
    """Shell lines that put a bootstrap role's credentials, and their expiry, in this build's
    environment (buildspec 0.2 runs a phase's commands in one shell, so the exports hold for the
    lines after them). botocore reads the expiry from AWS_CREDENTIAL_EXPIRATION (its EnvProvider),
    so preflight weighs the session it really has."""
    role, session = bootstrap_role_arn(settings, kind), f"hyperpod-{purpose}-{settings.env_name}"
    return [
        f"creds=$(aws sts assume-role --role-arn {role} --role-session-name {session} "
        "--query 'Credentials.[AccessKeyId,SecretAccessKey,SessionToken,Expiration]' --output text)",
        'export AWS_ACCESS_KEY_ID=$(echo "$creds" | cut -f1) AWS_SECRET_ACCESS_KEY=$(echo "$creds" | cut -f2) '
        'AWS_SESSION_TOKEN=$(echo "$creds" | cut -f3) AWS_CREDENTIAL_EXPIRATION=$(echo "$creds" | cut -f4)',
        f"export AWS_REGION={settings.region} AWS_DEFAULT_REGION={settings.region}",
    ]


def assume_lookup_role(settings: Settings, purpose: str) -> list[str]:
    return assume_role(settings, "lookup", purpose)


def stage_assembly(settings: Settings) -> str:
    """The Stage's nested assembly in the Synth step's output: what the stage deploys."""
    return f"{ASSEMBLY_DIR}/assembly-{settings.env_name}"


def stage_stacks(settings: Settings, protected_only: bool = False) -> str:
    """A shell word: the CloudFormation names of the stacks the Stage's assembly deploys (those it
    gives termination protection, with `protected_only`), read from its manifest."""
    test = ' and a["properties"].get("terminationProtection")' if protected_only else ""
    program = ('import json, sys; m = json.load(open(sys.argv[1])); print(" ".join(a["properties"]["stackName"] '
               f'for a in m["artifacts"].values() if a["type"] == "aws:cloudformation:stack"{test}))')
    return f"$(python3 -c {shlex.quote(program)} {stage_assembly(settings)}/manifest.json)"


def validate_commands(settings: Settings) -> list[str]:
    return [f".venv/bin/hyperpod-cdk validate -c env={settings.env_name}"]


def review_commands(settings: Settings, reviews_bucket: str) -> list[str]:
    """The review of the Stage's assembly against the templates the environment has deployed (aws
    cloudformation get-template; a stack not yet deployed is reviewed as a first deploy), its files
    copied to the reviews bucket under the commit's id. Its exit status is the review's: a refusal
    fails the step, and the stage after it does not start."""
    env = settings.env_name
    fetch = (
        f'mkdir -p deployed && against="" && for stack in {stage_stacks(settings)}; do '
        'if aws cloudformation get-template --stack-name "$stack" --query TemplateBody --output json '
        '> "deployed/$stack.json" 2> deployed/error; then against="$against --against $stack=deployed/$stack.json"; '
        'elif grep -q "does not exist" deployed/error; then rm -f "deployed/$stack.json"; '
        "else cat deployed/error; exit 1; fi; done"
    )
    keep = (f'aws s3 cp --recursive --quiet --exclude "*" --include "review-{env}.*" {REVIEW_DIR} '
            f'"s3://{reviews_bucket}/reviews/{env}/$CODEBUILD_RESOLVED_SOURCE_VERSION/"')
    return [
        *assume_lookup_role(settings, "review"),
        fetch,
        # The pipeline's own role again: it may write the reviews bucket, the lookup role may not.
        "unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_CREDENTIAL_EXPIRATION",
        f"status=0; .venv/bin/hyperpod-cdk review --env {env} --assembly {stage_assembly(settings)} $against "
        f"--outdir {REVIEW_DIR} || status=$?",
        keep,
        'exit "$status"',
    ]


def preflight_commands(settings: Settings) -> list[str]:
    """Read-only checks in the target account; the deploy plan's minutes come from the review step's
    files (this step's cdk.out), made of the same commit's config."""
    return [*assume_lookup_role(settings, "preflight"), f".venv/bin/hyperpod-cdk preflight -c env={settings.env_name} --pipeline"]


def protect_commands(settings: Settings) -> list[str]:
    """After the stage: termination protection on every stack the Stage's assembly protects, under
    the target's CDK deploy role (its bootstrap policy allows cloudformation:UpdateTerminationProtection)."""
    return [
        *assume_role(settings, "deploy", "protect"),
        f"for stack in {stage_stacks(settings, protected_only=True)}; do "
        'aws cloudformation update-termination-protection --enable-termination-protection --stack-name "$stack"; done',
    ]


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
        self.source = source = pipelines.CodePipelineSource.connection(
            d.source.repository, d.source.branch, connection_arn=d.source.connection_arn)
        install, build = synth_commands(settings, waves)
        # The artifact store as every bucket of ours is: versioned, access-logged, under a key of
        # this stack that the other accounts' deploy roles are granted (cross_account_keys).
        access_logs = self.access_log_bucket("AccessLogs")
        artifacts_key = self.data_key("ArtifactsKey", "delivery", "The pipeline's artifacts (source, cloud assembly)")
        self.artifacts = self.data_bucket("Artifacts", artifacts_key, access_logs, "artifacts/")
        # Each stage's review, kept by environment and commit, for the approver and afterwards.
        self.reviews = self.data_bucket("Reviews", artifacts_key, access_logs, "reviews/")
        self.synth = pipelines.CodeBuildStep(
            "Synth", input=source, install_commands=install, commands=build, primary_output_directory=ASSEMBLY_DIR,
            # Every environment of the waves is synthesized in one process: more memory than the small default's 3 GB.
            build_environment=codebuild.BuildEnvironment(compute_type=codebuild.ComputeType.MEDIUM))
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=settings.stack_name("delivery"),
            artifact_bucket=self.artifacts,
            # Environments in other accounts read the artifacts through a KMS key they are granted.
            cross_account_keys=True,
            enable_key_rotation=True,  # the replication buckets' keys in the support stacks
            cli_version=cdk_cli_version(),
            cdk_assets_cli_version=npm_pin("cdk-assets"),
            synth=self.synth,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=codebuild.LinuxBuildImage.STANDARD_7_0)
            ),
            asset_publishing_code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(compute_type=ASSET_COMPUTE),
                timeout=cdk.Duration.hours(ASSET_TIMEOUT_HOURS),
            ),
        )
        approve = d.approved(waves)
        self._review_steps: list[tuple[str, pipelines.CodeBuildStep]] = []
        self.stages: dict[str, cdk.Stage] = {}
        for i, wave in enumerate(waves, 1):
            target = self.pipeline.add_wave(f"wave-{i}") if len(wave) > 1 else self.pipeline
            for env in wave:
                # Under the App, not this stack: a Stage in a stack would take this stack's tags.
                stage = cdk.Stage(scope, env.env_name, env=cdk.Environment(account=env.account, region=env.region))
                stacks = compose(stage, env)
                self.stages[env.env_name] = stage
                checks = self._checks(env, source, approve=env.env_name in approve)
                post = [self._protect(env)] if any(s.termination_protection for s in stacks) else []
                target.add_stage(stage, pre=pipelines.Step.sequence(checks), post=post)
        self.pipeline.build_pipeline()  # now, so that what CDK Pipelines builds can be acknowledged below
        bucket = self.resolve(self.get_logical_id(self.reviews.node.default_child))
        for env, review in self._review_steps:
            self.reviews.grant_put(review.project, f"reviews/{env}/*")
            compliance.acknowledge(
                review.project, f"The review step writes this run's review of {env} under reviews/{env}/<commit>/, a key "
                "CodePipeline names only at run time (the commit's id); nothing else of the bucket",
                f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/reviews/{env}/*]")
        self._grant_connection(d.source.connection_arn)
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

    def _checks(self, env: Settings, source, *, approve: bool) -> list[pipelines.Step]:
        lookup = [iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[lookup_role_arn(env)])]
        install = ["make install-synth"]
        # The review reads the Synth step's assembly, not a synthesis of its own: what it describes is
        # what the stage deploys (the same templates, the prepared chart).
        review = pipelines.CodeBuildStep(
            f"Review-{env.env_name}", input=source, additional_inputs={ASSEMBLY_DIR: self.synth}, install_commands=install,
            commands=review_commands(env, self.reviews.bucket_name), role_policy_statements=lookup,
            primary_output_directory=REVIEW_DIR)
        steps: list[pipelines.Step] = [
            pipelines.CodeBuildStep(f"Validate-{env.env_name}", input=source, install_commands=install, commands=validate_commands(env)),
            review,
            # The review's files as preflight's cdk.out: its deploy plan, with no synthesis of its own.
            pipelines.CodeBuildStep(f"Preflight-{env.env_name}", input=source, additional_inputs={ASSEMBLY_DIR: review},
                                    install_commands=install, commands=preflight_commands(env), role_policy_statements=lookup),
        ]
        if approve:
            steps.append(pipelines.ManualApprovalStep(
                f"Approve-{env.env_name}",
                comment=f"Deploy {env.env_name} ({env.account}, {env.region})? Read this run's review first: "
                f"review-{env.env_name}.md under reviews/{env.env_name}/<commit>/ (the link), or the Review-{env.env_name} step's log.",
                review_url=self._reviews_url(env)))
        self._review_steps.append((env.env_name, review))
        return steps

    def _reviews_url(self, env: Settings) -> str:
        """The S3 console's page of the environment's reviews, one folder per commit."""
        console = {"aws-cn": "console.amazonaws.cn", "aws-us-gov": "console.amazonaws-us-gov.com"}.get(
            naming.partition(self.settings.delivery.region or self.settings.region), "console.aws.amazon.com")
        region = self.settings.delivery.region or self.settings.region
        return f"https://{console}/s3/buckets/{self.reviews.bucket_name}?region={region}&prefix=reviews/{env.env_name}/"

    def _protect(self, env: Settings) -> pipelines.CodeBuildStep:
        """Termination protection on the stage's protected stacks, read from its assembly."""
        return pipelines.CodeBuildStep(
            f"Protect-{env.env_name}", input=self.source, additional_inputs={ASSEMBLY_DIR: self.synth}, commands=protect_commands(env),
            role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[bootstrap_role_arn(env, "deploy")])])

    def _grant_connection(self, connection_arn: str) -> None:
        """IAM evaluates a connection under its own ARN's service prefix ("When specifying a resource
        in the IAM policy, the service prefix needs to match that of the resource": Developer Tools
        console guide, Connections rename), and CDK Pipelines grants codestar-connections:UseConnection
        whatever the ARN: the prefix of this ARN's service, where it is the newer one, too."""
        service = connection_arn.split(":")[2]
        if service == "codestar-connections":
            return
        for role in {id(r): r for r in self._connection_roles()}.values():
            role.add_to_principal_policy(iam.PolicyStatement(actions=[f"{service}:UseConnection"], resources=[connection_arn]))

    def _connection_roles(self) -> list[iam.IRole]:
        """The role CodePipeline's source action runs as (aws-cdk-lib: `<Source stage>/<action>/CodePipelineActionRole`),
        which CDK Pipelines grants the connection."""
        source = self.pipeline.pipeline.node.find_child("Source")
        return [c for c in source.node.find_all() if isinstance(c, iam.Role) and c.node.id == "CodePipelineActionRole"]
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
