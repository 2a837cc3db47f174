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


def apply(app: cdk.App) -> None:
    """Everything compliance adds to a composed app: both nag packs, and checkov's
    documented skips on the Lambdas that aws-cdk-lib builds."""
    add_packs(app)
    for stack in _stacks(app):
        skip_checkov_on_cdk_lambdas(stack)


def _stacks(scope: cdk.Stage):
    """The stacks of the App and of a pipeline's Stages in it (a stack in a Stage is no child of the App)."""
    for child in scope.node.children:
        if isinstance(child, cdk.Stack):
            yield child
        elif isinstance(child, cdk.Stage):
            yield from _stacks(child)


def checkov_skip(resource: cdk.CfnResource, **comments: str) -> None:
    """Record checkov skips in the resource's CloudFormation Metadata, each with its reason."""
    existing = resource.get_metadata("checkov") or {"skip": []}
    existing["skip"] += [{"id": check, "comment": comment} for check, comment in comments.items()]
    resource.add_metadata("checkov", existing)


# Construct-path marker -> what that aws-cdk-lib Lambda does. Its function settings
# (DLQ, reserved concurrency, env encryption, VPC) are not ours to set.
_CDK_LAMBDAS = {
    "/KubectlProvider/": "aws_eks_v2's kubectl provider (applies manifests and charts)",
    "/Custom::CDKBucketDeployment": "aws-cdk-lib's BucketDeployment uploader (lifecycle scripts)",
    "/Custom::S3AutoDeleteObjectsCustomResourceProvider/": "aws-cdk-lib's auto-delete of objects when dev destroys a bucket",
    "/Custom::VpcRestrictDefaultSGCustomResourceProvider/": "aws-cdk-lib's removal of the default security group's rules",
    "/Provider/framework-": "aws-cdk-lib's custom-resource provider framework (a readiness gate's waiter)",
    "/Custom::CDKECRDeployment": "cdk-ecr-deployment's image copier (cdklabs; copies the chart's images into ECR)",
    "/AWS679f53fac002430cb0da5b7982bd2287/": "aws-cdk-lib's AwsCustomResource handler (a deploy-time check)",
    "/AWSCDKCfnUtilsProviderCustomResourceProvider/": "aws-cdk-lib's CfnJson resolver (IRSA trust conditions keyed by the OIDC issuer)",
}


def skip_checkov_on_cdk_lambdas(stack: cdk.Stack) -> None:
    for construct in stack.node.find_all():
        if not (isinstance(construct, cdk.CfnResource) and construct.cfn_resource_type == "AWS::Lambda::Function"):
            continue
        path = "/" + construct.node.path
        what = next((w for marker, w in _CDK_LAMBDAS.items() if marker in path), None)
        if what is None:
            continue  # a Lambda of our own gets no pass: checkov judges it
        why = f"{what}: a CloudFormation custom-resource handler built by aws-cdk-lib"
        checkov_skip(
            construct,
            CKV_AWS_115=f"{why}; invoked only by CloudFormation, so concurrency stays bounded by deploys",
            CKV_AWS_116=f"{why}; CloudFormation retries and reports failures, a DLQ would never be read",
            CKV_AWS_117=f"{why}; it calls only AWS APIs (or runs in the VPC already for kubectl)",
            CKV_AWS_173=f"{why}; its environment holds no secrets, only resource names",
        )


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


def acknowledge_newer_schema(construct: IConstruct, rule: str, what: str, resource_type: str) -> None:
    """A finding of CDK's own CloudFormation validator ("CloudFormation Validate", which
    `cdk synth` runs under @aws-cdk/core:validateAgainstDefaultRules) where its bundled schemas
    predate what the template uses: acknowledged on that construct alone, naming the schema
    that has it. cfn-lint, which the review and the tests run, checks the resource against
    that newer schema, so nothing goes unchecked. `what` says what the bundled schema lacks."""
    import importlib.metadata

    from infra import cfn_schema

    reason = (
        f"aws-cdk-lib {importlib.metadata.version('aws-cdk-lib')}'s bundled CloudFormation schemas predate {what}; "
        f"CloudFormation's own schema has it ({cfn_schema.source(resource_type)}), and cfn-lint checks the resource against it"
    )
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=f"CloudFormation-Validate::{rule}", reason=reason))


def acknowledge_regional_snapshots(stacks: list[cdk.Stack], resource_types: list[str]) -> None:
    """F3006 of CDK's own CloudFormation validator ("Resource type ... does not exist in
    <region>") on each resource of `resource_types` (Settings.regional_resource_types): the
    validator's per-region type lists are a snapshot bundled into aws-cdk-lib, as cfn-lint's are,
    and the two disagree (aws-cdk-lib 2.275 lacks ClusterSchedulerConfig in us-west-2; cfn-lint
    1.58 lacks ComputeQuota in ap-northeast-1, though task governance ships both together).
    Whether the region offers a type is not an offline fact: validate warns, and `hyperpod-cdk
    preflight` asks the account's CloudFormation (DescribeType). Acknowledged on each such
    resource alone, naming its type and region."""
    import importlib.metadata

    from infra import cfn_schema

    versions = f"aws-cdk-lib {importlib.metadata.version('aws-cdk-lib')}'s bundled validator and cfn-lint {importlib.metadata.version('cfn-lint')}"
    for stack in stacks:
        for construct in stack.node.find_all():
            if not (isinstance(construct, cdk.CfnResource) and construct.cfn_resource_type in resource_types):
                continue
            if type(construct) is cdk.CfnResource:
                continue  # a type this aws-cdk-lib has no L1 for: its validator knows none, acknowledged where it is built
            resource_type, region = construct.cfn_resource_type, stack.region
            listed = "lists" if cfn_schema.region_has(region, resource_type) else "does not list"
            reason = (
                f"{versions} (which {listed} {resource_type} in {region}) hold region lists that are offline snapshots; no "
                "offline file settles whether CloudFormation offers it there: hyperpod-cdk preflight asks the account's "
                "CloudFormation (DescribeType)"
            )
            cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id="CloudFormation-Validate::F3006", reason=reason))


_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/"

# What every Lambda that aws-cdk-lib builds for a custom resource brings along.
_CDK_LAMBDA = (
    f"AwsSolutions-IAM4[{_MANAGED}service-role/AWSLambdaBasicExecutionRole]",
    "AwsSolutions-L1",
    "NIST.800.53.R5-IAMNoInlinePolicy",
    "NIST.800.53.R5-LambdaConcurrency",
    "NIST.800.53.R5-LambdaDLQ",
)


def partition(scope: IConstruct) -> str:
    """The partition as cdk-nag prints it in a finding: the literal (the
    enablePartitionLiterals flag, with a known region) or the pseudo parameter."""
    value = cdk.Stack.of(scope).partition
    return "<AWS::Partition>" if cdk.Token.is_unresolved(value) else value


def adopt_log_groups(stacks: list[cdk.Stack], key, retention_days: int, removal: cdk.RemovalPolicy) -> None:
    """The log groups aws-cdk-lib creates for its own Lambdas (useCdkManagedLogGroup) get
    what ours have: the environment's logs key, its retention and its removal policy."""
    from aws_cdk import aws_logs as logs

    for stack in stacks:
        for construct in stack.node.find_all():
            if isinstance(construct, logs.CfnLogGroup) and construct.kms_key_id is None:
                construct.kms_key_id = key.key_arn
                construct.retention_in_days = retention_days
                construct.apply_removal_policy(removal)


def cdk_asset_read(stack: cdk.Stack) -> tuple[str, ...]:
    """The wildcard findings of CDK's grant to read this stack's file assets."""
    return (
        "AwsSolutions-IAM5[Action::s3:GetBucket*]",
        "AwsSolutions-IAM5[Action::s3:GetObject*]",
        "AwsSolutions-IAM5[Action::s3:List*]",
        f"AwsSolutions-IAM5[Resource::arn:{partition(stack)}:s3:::cdk-hnb659fds-assets-{stack.account}-{stack.region}/*]",
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
    acknowledge_kubectl_provider(cluster.node.find_child("KubectlProvider"))


def acknowledge_kubectl_provider(provider) -> None:
    """The kubectl provider aws_eks_v2 builds, for a cluster of ours or one imported."""
    stack = cdk.Stack.of(provider)
    handler = provider.node.find_child("Handler")
    handler_id = stack.get_logical_id(handler.node.default_child)
    # Beside the role it grants to: the function's own role, or (a role given) the role's scope.
    found = handler.node.try_find_child("HasEcrPublic") or stack.node.try_find_child("HasEcrPublic")
    # No condition: a given role, to which nothing is attached (stacks/cluster.py removes it).
    ecr_public = (
        [
            'AwsSolutions-IAM4[Policy::{"Fn::If":["' + stack.get_logical_id(found) + '",{"Fn::Join":["",["arn:",'
            '{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]'
        ]
        if found is not None
        else []
    )
    acknowledge_cdk_lambda(
        provider,
        "The kubectl provider of aws_eks_v2 (runs kubectl and helm in the VPC); it needs VPC access, "
        "ECR read-only for chart images and read of the chart assets",
        f"AwsSolutions-IAM4[{_MANAGED}service-role/AWSLambdaVPCAccessExecutionRole]",
        f"AwsSolutions-IAM4[{_MANAGED}AmazonEC2ContainerRegistryReadOnly]",
        *ecr_public,
        f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]",
        *cdk_asset_read(stack),
    )


def acknowledge_provider(construct: IConstruct, what: str) -> None:
    """A readiness gate on aws-cdk-lib's custom-resource provider framework: our two Python
    handlers plus the framework's own Lambdas and waiter state machine."""
    stack = cdk.Stack.of(construct)
    functions = [
        c.node.default_child
        for c in construct.node.find_all()
        if c.node.default_child is not None
        and isinstance(c.node.default_child, cdk.CfnResource)
        and c.node.default_child.cfn_resource_type == "AWS::Lambda::Function"
    ]
    acknowledge(
        construct,
        f"{what}; the provider framework (aws-cdk-lib) pins its own Lambdas' runtime and grants (invoke of "
        "each function's versions), and its waiter state machine only loops on isComplete, each step logged by "
        "the Lambdas; whatever runs outside the VPC calls only AWS APIs, and CloudFormation "
        "invokes them once per deploy",
        *_CDK_LAMBDA,
        "NIST.800.53.R5-LambdaInsideVPC",
        "AwsSolutions-SF1",
        "AwsSolutions-SF2",
        *(f"AwsSolutions-IAM5[Resource::<{stack.get_logical_id(f)}.Arn>:*]" for f in functions),
    )
