"""Shared storage for the cluster stack: one FSx for Lustre file system in the GPU AZ, or
the existing one config names (fsx.enabled). Pods reach it through the FSx CSI driver as
the claim `fsx` in every team namespace (addons/fsx_csi.py).

The addons stack learns the file system's id, DNS name and mount name from SSM parameters
the cluster stack writes, not from exports: an export would stop `fsx.enabled` from being
switched off later ("export in use" while the deployed addons stack still imports it).

Where data is kept (protection.retain_data), the file system is not retained as it stands:
its network interfaces sit in the HyperPod subnet, so a kept file system would stop the
network stack's deletion. A final backup (which outlives the file system) is taken and
waited for before the file system is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra import readiness, timing
from infra.config import Settings

FIELDS = ("file-system-id", "dns-name", "mount-name")


@dataclass(frozen=True)
class FileSystem:
    """What a static PersistentVolume names: the id, its DNS name and its Lustre mount name."""

    file_system_id: str
    dns_name: str
    mount_name: str


def parameter_name(settings: Settings, field: str) -> str:
    return f"/{settings.prefix}/{settings.env_name}/fsx/{field}"


def shared_file_system(stack: cdk.Stack, settings: Settings, network, key: kms.IKey) -> FileSystem:
    existing = settings.fsx.existing
    if existing is not None:
        return FileSystem(existing.file_system_id, existing.dns_name, existing.mount_name)
    subnet = network.hyperpod_subnet_by_az[settings.fsx_availability_zone]
    file_system = fsx.CfnFileSystem(
        stack,
        "SharedFileSystem",
        file_system_type="LUSTRE",
        storage_type="SSD",
        storage_capacity=settings.fsx.storage_gib,
        # In the nodes' subnet and security group (which admits Lustre's ports from itself).
        subnet_ids=[subnet.subnet_id],
        security_group_ids=[network.efa_security_group.security_group_id],
        kms_key_id=key.key_id,
        # As the quick setup's fsx-template.yaml: Lustre 2.15, PERSISTENT_2, no compression.
        file_system_type_version="2.15",
        lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
            deployment_type="PERSISTENT_2",
            per_unit_storage_throughput=settings.fsx.throughput_per_tib,
            data_compression_type="NONE",
            # Where data is kept (prod), a week of daily backups; the quick setup keeps none.
            automatic_backup_retention_days=7 if settings.protection.retain_data else 0,
            copy_tags_to_backups=settings.protection.retain_data,
        ),
    )
    file_system.apply_removal_policy(cdk.RemovalPolicy.DESTROY)
    if settings.protection.retain_data:
        # A replacement (another AZ) keeps the old file system; a deletion backs it up first.
        file_system.cfn_options.update_replace_policy = cdk.CfnDeletionPolicy.RETAIN
        FinalBackup(stack, "SharedFileSystemFinalBackup", file_system=file_system)
    identity = FileSystem(file_system.ref, file_system.attr_dns_name, file_system.attr_lustre_mount_name)
    for field, value in zip(FIELDS, (identity.file_system_id, identity.dns_name, identity.mount_name)):
        ssm.StringParameter(
            stack, f"SharedFileSystem-{field}", parameter_name=parameter_name(settings, field), string_value=value,
            description=f"FSx for Lustre {field} of {settings.stack_name('cluster')}, read by {settings.stack_name('addons')}",
        )
    cdk.CfnOutput(stack, "FileSystemId", value=file_system.ref)
    return identity


def read_file_system(scope: Construct, settings: Settings) -> FileSystem:
    """The shared file system as another stack sees it: config's, or the cluster stack's
    through its SSM parameters (CloudFormation resolves them at each deploy; nothing is exported)."""
    existing = settings.fsx.existing
    if existing is not None:
        return FileSystem(existing.file_system_id, existing.dns_name, existing.mount_name)
    return FileSystem(*(ssm.StringParameter.value_for_string_parameter(scope, parameter_name(settings, f)) for f in FIELDS))


class FinalBackup(readiness.ChainedWait):
    """On deletion, a user-initiated backup of the file system (it outlives the file system),
    waited for until AVAILABLE before CloudFormation deletes the file system."""

    def __init__(self, scope: Construct, id_: str, *, file_system: fsx.CfnFileSystem):
        stack = cdk.Stack.of(scope)
        super().__init__(
            scope,
            id_,
            handler="fsx_backup",
            resource_type="Custom::FsxFinalBackup",
            properties={"FileSystemId": file_system.ref},
            total_minutes=timing.LINK_WAIT_S / 60,
            description="is the file system's final backup AVAILABLE",
            why_these_functions="a final backup of the shared file system on deletion; its handlers call only the FSx API",
        )
        # Its FileSystemId refers to the file system, so CloudFormation deletes it (and waits for
        # the backup) before the file system.
        arn = f"arn:{stack.partition}:fsx:{stack.region}:{stack.account}"
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(
                actions=["fsx:CreateBackup", "fsx:TagResource"],
                resources=[f"{arn}:file-system/{file_system.ref}", f"{arn}:backup/*"],
            )
        )
        self.is_complete.add_to_role_policy(iam.PolicyStatement(actions=["fsx:DescribeBackups"], resources=["*"]))
        from infra import compliance

        compliance.acknowledge(
            self.is_complete,
            "A backup's id is assigned when it is created, so its ARN is this account's backups; DescribeBackups "
            "supports no resource-level permissions",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:fsx:{stack.region}:{stack.account}:backup/*]",
            "AwsSolutions-IAM5[Resource::*]",
        )
