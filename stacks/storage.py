"""Shared storage for the cluster stack: one FSx for Lustre file system in the GPU AZ, or
the existing one config names (fsx.enabled). Pods reach it through the FSx CSI driver as
the claim `fsx` in every team namespace (addons/fsx_csi.py)."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms

from infra.config import Settings


@dataclass(frozen=True)
class FileSystem:
    """What a static PersistentVolume names: the id, its DNS name and its Lustre mount name."""

    file_system_id: str
    dns_name: str
    mount_name: str


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
    policy = cdk.RemovalPolicy.RETAIN if settings.protection.retain_data else cdk.RemovalPolicy.DESTROY
    file_system.apply_removal_policy(policy)
    cdk.CfnOutput(stack, "FileSystemId", value=file_system.ref)
    return FileSystem(file_system.ref, file_system.attr_dns_name, file_system.attr_lustre_mount_name)
