"""The Stack every deployable stack derives from."""

from __future__ import annotations

import hashlib
import re

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from constructs import Construct, IConstruct

from infra import compliance
from infra.config import Settings

# The id aws-cdk-lib gives AwsCustomResource's singleton handler in a stack.
AWS_CUSTOM_RESOURCE_FUNCTION = "AWS679f53fac002430cb0da5b7982bd2287"


class PlatformStack(cdk.Stack):
    """Names, env, tags and termination protection from the settings, and no AZ lookups.

    `ec2.Vpc(availability_zones=...)` still asks its stack for the region's AZs, which is a
    context lookup that needs credentials at synth. Answering from config keeps synth
    hermetic: the cloud assembly then has no `missing` context entries.
    """

    def __init__(self, scope: Construct, suffix: str, *, settings: Settings, description: str,
                 account: str | None = None, region: str | None = None):
        """`account` and `region`: where a stack that is not the environment's own goes (the
        delivery stack, in the pipeline's account and region); by default the environment's."""
        super().__init__(
            scope,
            settings.stack_name(suffix),
            stack_name=settings.stack_name(suffix),
            env=cdk.Environment(account=account or settings.account, region=region or settings.region),
            termination_protection=settings.protection.termination_protection,
            description=f"{description} (hyperpod-cdk, env {settings.env_name})",
        )
        self.settings = settings
        self._adopted_bucket_setters: dict[str, list[IConstruct]] = {}
        self._sdk_function_acknowledged = False
        for key, value in settings.all_tags.items():
            cdk.Tags.of(self).add(key, value)

    def keep_exported(self, *values: str) -> None:
        """Export `values` whether or not a stack imports them today. A strong reference
        exports only while its consumer is in the app: switching an optional stack off
        would remove an export its deployed stack still imports, and CloudFormation
        refuses that update ("export in use"). A literal (an existing cluster's name) is
        written into its consumers as it is, and has nothing to export."""
        for value in values:
            if cdk.Token.is_unresolved(value):
                self.export_value(value)

    @property
    def availability_zones(self) -> list[str]:
        return list(self.settings.availability_zones)

    @property
    def data_removal_policy(self) -> cdk.RemovalPolicy:
        """What happens to buckets, keys and log groups when the stack is deleted."""
        return cdk.RemovalPolicy.RETAIN if self.settings.protection.retain_data else cdk.RemovalPolicy.DESTROY

    def log_group(self, id_: str, key: kms.IKey, name: str) -> logs.LogGroup:
        """A KMS-encrypted log group with the configured retention."""
        group = logs.LogGroup(self, id_, log_group_name=name, encryption_key=key, removal_policy=self.data_removal_policy)
        # Config allows exactly the values CloudWatch accepts; the L2 wants an enum member.
        group.node.default_child.retention_in_days = self.settings.protection.log_retention_days
        if self.settings.protection.retain_data:
            # Adopted by a redeploy still associated with the kept logs key of the deploy that made
            # it; new events go under this deploy's key (earlier ones stay under the kept key).
            self._setting_call(
                f"{id_}Key",
                "CloudWatchLogs",
                "associateKmsKey",
                {"logGroupName": name, "kmsKeyId": key.key_arn},
                grant="logs:AssociateKmsKey",
                resource=group.log_group_arn,
            )
        return group

    def data_key(self, id_: str, purpose: str, description: str) -> kms.Key:
        """A customer-managed key with rotation, kept or destroyed with the data it guards."""
        return kms.Key(
            self,
            id_,
            alias=f"alias/{self.settings.prefix}-{self.settings.env_name}-{purpose}",
            description=description,
            enable_key_rotation=True,
            removal_policy=self.data_removal_policy,
        )

    def _bucket(self, id_: str, **kwargs) -> s3.Bucket:
        retain = self.settings.protection.retain_data
        return s3.Bucket(
            self,
            id_,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=self.data_removal_policy,
            auto_delete_objects=not retain,
            **kwargs,
        )

    def access_log_bucket(self, id_: str) -> s3.Bucket:
        bucket = self._bucket(id_, encryption=s3.BucketEncryption.S3_MANAGED)
        compliance.checkov_skip(
            bucket.node.default_child,
            CKV_AWS_18="This is the server-access-log target; logging it into itself would loop",
        )
        compliance.acknowledge(
            bucket,
            "This is the server-access-log target: S3 delivers access logs only to SSE-S3 buckets, "
            "and logging the log bucket into itself would loop; it is not replicated for the same reason",
            "AwsSolutions-S1",
            "NIST.800.53.R5-S3BucketLoggingEnabled",
            "NIST.800.53.R5-S3DefaultEncryptionKMS",
            "NIST.800.53.R5-S3BucketReplicationEnabled",
        )
        return bucket

    def data_bucket(
        self,
        id_: str,
        key: kms.IKey,
        access_logs: s3.IBucket,
        log_prefix: str,
        bucket_name: str | None = None,
        lifecycle_rules: list[s3.LifecycleRule] | None = None,
    ) -> s3.Bucket:
        """Encrypted with `key`, SSL-only, versioned, access-logged into `access_logs`."""
        bucket = self._bucket(
            id_,
            bucket_name=bucket_name,
            lifecycle_rules=lifecycle_rules,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=log_prefix,
        )
        compliance.acknowledge(
            bucket,
            "Single-region platform bucket: its content is rebuilt from this repository or the job, "
            "so cross-region replication would add cost without a recovery need",
            "NIST.800.53.R5-S3BucketReplicationEnabled",
        )
        self._adopted_bucket_setters[bucket.node.path] = []
        if bucket_name and self.settings.protection.retain_data:
            # A redeploy adopts the kept bucket with the default encryption and access-log target
            # of the deploy that made it: a key and a log bucket this deploy neither made nor grants.
            by_default = {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key.key_arn}
            self._adopted_bucket_setters[bucket.node.path] = [
                self._setting_call(
                    f"{id_}DefaultEncryption",
                    "S3",
                    "putBucketEncryption",
                    {
                        "Bucket": bucket.bucket_name,
                        "ServerSideEncryptionConfiguration": {
                            "Rules": [{"ApplyServerSideEncryptionByDefault": by_default, "BucketKeyEnabled": True}]
                        },
                    },
                    grant="s3:PutEncryptionConfiguration",
                    resource=bucket.bucket_arn,
                ),
                self._setting_call(
                    f"{id_}AccessLogging",
                    "S3",
                    "putBucketLogging",
                    {
                        "Bucket": bucket.bucket_name,
                        "BucketLoggingStatus": {"LoggingEnabled": {"TargetBucket": access_logs.bucket_name, "TargetPrefix": log_prefix}},
                    },
                    grant="s3:PutBucketLogging",
                    resource=bucket.bucket_arn,
                ),
            ]
            # Log delivery is admitted by the log bucket's policy: set the target once it stands.
            log_policy = access_logs.policy
            if log_policy is not None and cdk.Stack.of(log_policy) is self:
                self._adopted_bucket_setters[bucket.node.path][1].node.add_dependency(log_policy)
        return bucket

    def set_when_adopted(self, bucket: s3.IBucket) -> list[IConstruct]:
        """What a writer of `bucket` waits for beside the bucket: where a redeploy may adopt it,
        the calls that set its default encryption and access logging to this deploy's."""
        return list(self._adopted_bucket_setters.get(bucket.node.path, []))

    def earlier_keys(self, bucket_name: str, objects: str) -> list[iam.PolicyStatement]:
        """Decrypt, through S3 and for objects of `bucket_name` only, whichever key of this account
        an earlier deploy wrote them under. Where data is kept, a redeploy adopts the bucket with
        what it holds (checkpoints to resume from), while every key is new: a KMS key's identifier
        is its read-only KeyId, which no template fixes, so `--import-existing-resources` cannot
        adopt the kept key. With S3 Bucket Keys the encryption context is the bucket's ARN, without
        them the object's (S3 user guide, "Encryption context")."""
        if not self.settings.protection.retain_data:
            return []
        arn = f"arn:{self.partition}:s3:::{bucket_name}"
        return [
            iam.PolicyStatement(
                sid="ObjectsUnderKeptKeys",
                actions=["kms:Decrypt"],
                resources=[f"arn:{self.partition}:kms:{self.region}:{self.account}:key/*"],
                conditions={
                    "StringEquals": {"kms:ViaService": f"s3.{self.region}.amazonaws.com"},
                    "StringLike": {"kms:EncryptionContext:aws:s3:arn": [arn, f"{arn}/{objects}"]},
                },
            )
        ]

    def earlier_keys_acknowledgment(self) -> str:
        return f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:kms:{self.region}:{self.account}:key/*]"

    def acknowledge_sdk_function(self) -> None:
        """Once per stack: the singleton function behind every AwsCustomResource in it."""
        if self._sdk_function_acknowledged:
            return
        self._sdk_function_acknowledged = True
        compliance.acknowledge_cdk_lambda(
            self.node.find_child(AWS_CUSTOM_RESOURCE_FUNCTION),
            "aws-cdk-lib's AwsCustomResource handler: each of its calls names the one resource it acts on "
            "(setting what an adopted bucket or log group keeps from an earlier deploy, checking the job's "
            "token secret); it calls only AWS APIs, so it runs outside the VPC",
            "NIST.800.53.R5-LambdaInsideVPC",
        )

    def _setting_call(self, id_: str, service: str, action: str, parameters: dict, *, grant: str, resource: str) -> cr.AwsCustomResource:
        """Set one setting of a kept resource through its own API, on create and on update.
        CloudFormation's import keeps what it adopts as it is (its user guide: drift detection
        "after the import is complete"), and an update changes only what the template changes:
        without this, a redeploy's adopted resource keeps naming what the earlier deploy made."""
        call = cr.AwsSdkCall(service=service, action=action, parameters=parameters, physical_resource_id=cr.PhysicalResourceId.of(id_))
        setter = cr.AwsCustomResource(
            self,
            id_,
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_statements([iam.PolicyStatement(actions=[grant], resources=[resource])]),
            install_latest_aws_sdk=False,
        )
        compliance.acknowledge(setter, "One call on the one kept resource it names, as its inline policy says", "NIST.800.53.R5-IAMNoInlinePolicy")
        self.acknowledge_sdk_function()
        return setter

def _alphanumeric(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", text)


def unique_id(components: list[str]) -> str:
    """CDK's makeUniqueId (aws-cdk-lib core/lib/private/uniqueid.ts): what `Names.uniqueId` and a
    stack's logical IDs are made of. A single component is itself; more are their alphanumerics,
    less 'Resource' and a repeated tail, then the first 8 hex digits of the path's MD5."""
    components = [c for c in components if c != "Default"]
    if len(components) == 1 and len(_alphanumeric(components[0])) <= 255:
        return _alphanumeric(components[0])
    digest = hashlib.md5("/".join(components).encode()).hexdigest()[:8].upper()
    human: list[str] = []
    for c in components:
        if not human or not human[-1].endswith(c):
            human.append(c)
    return "".join(_alphanumeric(c) for c in human if c != "Resource")[:240] + digest


def keep_app_logical_ids(stack: cdk.Stack) -> None:
    """Logical IDs in a stack under a Stage as they are under the App. They are made of the path
    below the stack, which a Stage does not change, but a construct id made of another construct's
    unique ID (a security group's rule from itself: `from <group's unique ID>:ALL TRAFFIC`) carries
    the Stage's name; CloudFormation would create that rule anew and find it exists already. Each
    such resource gets the ID it has under the App."""
    scopes = [s.node.id for s in stack.node.scopes[1:]]
    stages = scopes[:-1]
    if not stages:
        return
    marker = _alphanumeric("".join(scopes))  # how every unique ID of this stack's constructs begins
    elements = [c for c in stack.node.find_all() if isinstance(c, cdk.CfnElement)]
    below = {c: [s.node.id for s in c.node.scopes[len(scopes) + 1:]] for c in elements}
    carrying = {c: path for c, path in below.items() if any(marker in part for part in path)}
    if not carrying:
        return
    renames = {}
    for c in stack.node.find_all():
        path = [s.node.id for s in c.node.scopes[1:]]
        renames[unique_id(path)] = unique_id(path[len(stages):])
    for element, path in carrying.items():
        app_path = []
        for part in path:
            for staged, plain in renames.items():
                part = part.replace(staged, plain)
            app_path.append(part)
        element.override_logical_id(unique_id(app_path))
