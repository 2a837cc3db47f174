"""`<prefix>-<env>-sample-job`: the LLaMA FSDP HyperPodPyTorchJob in a team's queue.

The image is built from training/ at deploy (a CDK Docker image asset; synth only stages
the folder), unless config names one. Checkpoints go to an S3 bucket through a Pod
Identity role bound to the job's service account. The stack depends on the addons stack
(the operator, the team queues and their namespaces), so `cdk destroy` removes the job
before them.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra import compliance
from infra.config import TRAINING_IMAGE_PLATFORM, Settings
from infra.pod_identity import pod_identity_role
from infra.stack import PlatformStack
from manifests import job as job_manifest
from stacks.cluster import ClusterStack

TRAINING_DIR = Path(__file__).resolve().parent.parent / "training"


class SampleJobStack(PlatformStack):
    def __init__(
        self,
        scope: Construct,
        *,
        settings: Settings,
        cluster: ClusterStack,
        after: PlatformStack,
    ):
        super().__init__(scope, "sample-job", settings=settings, description="Sample LLaMA 3.1 8B FSDP HyperPodPyTorchJob")
        # The operator, the team's queue and its namespace exist before the job.
        self.add_stack_dependency(after)
        job = settings.sample_job
        if job.image_uri:
            image = job.image_uri
        else:
            asset = ecr_assets.DockerImageAsset(
                self, "TrainingImage", directory=str(TRAINING_DIR), platform=ecr_assets.Platform.custom(TRAINING_IMAGE_PLATFORM),
                # Run from a checkout, not in the job (docs/serving.md): outside the image and its content hash.
                exclude=["export_hf.py"],
            )
            image = asset.image_uri
        identity = None
        if job_manifest.needs_aws(settings):
            identity = pod_identity_role(
                self,
                cluster.cluster,
                "SampleJob",
                namespace=job_manifest.namespace(settings),
                service_account=job_manifest.SERVICE_ACCOUNT,
                description="Sample training job: its checkpoints and its Hugging Face token",
                statements=(),
            )
        if job.checkpoint_to == "s3":
            self.checkpoint_bucket = self.data_bucket(
                "CheckpointBucket",
                cluster.bucket_key,
                cluster.access_logs,
                "checkpoint-bucket/",
                # The name the manifest (and render-job) derive the checkpoint URI from.
                bucket_name=settings.checkpoint_bucket_name,
                lifecycle_rules=[
                    # train.py deletes all but the newest checkpoints; versioning would keep
                    # every deleted shard forever without this.
                    s3.LifecycleRule(
                        id="ExpireDeletedCheckpoints",
                        noncurrent_version_expiration=cdk.Duration.days(7),
                        expired_object_delete_marker=True,
                    ),
                    # A rank killed mid-upload leaves parts that are billed until aborted.
                    s3.LifecycleRule(id="AbortIncompleteUploads", abort_incomplete_multipart_upload_after=cdk.Duration.days(1)),
                ],
            )
            policy = self._checkpoint_policy(identity.role, cluster.bucket_key)
            compliance.acknowledge(
                policy,
                "Checkpoints are many objects under the job's prefix of its own bucket, written by every rank; "
                "the grant is S3 object read/write there, a listing of that prefix only, and the data key through S3 only",
                f"AwsSolutions-IAM5[Resource::<{self.get_logical_id(self.checkpoint_bucket.node.default_child)}.Arn>/{job.name}/*]",
            )
            if settings.protection.retain_data:
                compliance.acknowledge(
                    policy,
                    "Checkpoints written before a redeploy are under the earlier deploy's kept key, whose id no template "
                    "knows: Decrypt on this account's keys only through S3 and only for this bucket's objects",
                    self.earlier_keys_acknowledgment(),
                )
        self.objects = job_manifest.objects(settings, image=image)
        self.manifest = eks.KubernetesManifest(self, "Job", cluster=cluster.cluster, manifest=self.objects, overwrite=True)
        if identity is not None:
            # Pods get credentials only once the association exists.
            self.manifest.node.add_dependency(identity.association)
        if job.checkpoint_to == "s3":
            self.manifest.node.add_dependency(self.checkpoint_bucket.node.default_child, *self.set_when_adopted(self.checkpoint_bucket))
        if job.hf_token_secret:
            self.manifest.node.add_dependency(self._token_secret(identity.role))
        cdk.CfnOutput(self, "JobName", value=f"{job_manifest.namespace(settings)}/{job.name}")
        cdk.CfnOutput(
            self,
            "WatchCommand",
            value=f"kubectl get hyperpodpytorchjobs -n {job_manifest.namespace(settings)} {job.name} -w",
        )
        if job.checkpoint_to == "s3":
            cdk.CfnOutput(self, "CheckpointUri", value=job_manifest.checkpoint_uri(settings))

    def _token_secret(self, role: iam.IRole) -> Construct:
        """The job may read its Hugging Face token, and the deploy stops before the job if the
        secret is missing (a job without it would fail at start, inside a running cluster)."""
        name = self.settings.sample_job.hf_token_secret
        # Secrets Manager appends a hyphen and six random characters to a secret's ARN.
        arn = f"arn:{self.partition}:secretsmanager:{self.region}:{self.account}:secret:{name}-??????"
        policy = iam.ManagedPolicy(
            self,
            "SampleJobTokenPolicy",
            roles=[role],
            statements=[iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[arn])],
        )
        compliance.acknowledge(
            policy,
            "A secret's ARN ends in six characters Secrets Manager assigns; config names the secret, so the grant "
            "matches that one name's ARNs",
            f"AwsSolutions-IAM5[Resource::{arn.replace(self.partition, compliance.partition(self))}]",
        )
        check = cr.AwsCustomResource(
            self,
            "TokenSecretExists",
            on_update=cr.AwsSdkCall(
                service="SecretsManager",
                action="describeSecret",
                parameters={"SecretId": name},
                physical_resource_id=cr.PhysicalResourceId.of(f"{name}-exists"),
                output_paths=["Name"],
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=["secretsmanager:DescribeSecret"], resources=[arn])]
            ),
            install_latest_aws_sdk=False,
        )
        compliance.acknowledge(
            check,
            "DescribeSecret on the one secret config names (a secret's ARN ends in six characters Secrets Manager assigns)",
            f"AwsSolutions-IAM5[Resource::{arn.replace(self.partition, compliance.partition(self))}]",
            "NIST.800.53.R5-IAMNoInlinePolicy",
        )
        self.acknowledge_sdk_function()
        return check

    def _checkpoint_policy(self, role: iam.IRole, key) -> iam.ManagedPolicy:
        """What train.py's checkpoints (s3fs) do under the job's prefix: read, write (a multipart
        upload is PutObject), rename (a copy and a delete), prune; list that prefix and no other
        (s3:prefix); and the bucket's key only as S3 calls it for those objects (kms:ViaService). Resuming
        after a redeploy reads checkpoints written under the earlier deploy's key (earlier_keys)."""
        prefix = self.settings.sample_job.name
        bucket = self.checkpoint_bucket
        return iam.ManagedPolicy(
            self,
            "SampleJobCheckpointPolicy",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    sid="CheckpointObjects",
                    actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                    resources=[bucket.arn_for_objects(f"{prefix}/*")],
                ),
                iam.PolicyStatement(
                    sid="ListTheJobsPrefixOnly",
                    actions=["s3:ListBucket"],
                    resources=[bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
                ),
                iam.PolicyStatement(sid="BucketRegion", actions=["s3:GetBucketLocation"], resources=[bucket.bucket_arn]),
                iam.PolicyStatement(
                    sid="CheckpointKeyThroughS3Only",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{self.region}.amazonaws.com"}},
                ),
                *self.earlier_keys(self.settings.checkpoint_bucket_name, f"{prefix}/*"),
            ],
        )
