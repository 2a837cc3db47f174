"""Shared storage: FSx for Lustre, new or existing."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from infra.config.acceptance import PROBE_IMAGE
from infra.config.base import Model


class ExistingFileSystem(Model):
    """An FSx for Lustre file system made elsewhere: what a static PersistentVolume needs."""

    file_system_id: str = Field(pattern=r"^fs-[0-9a-f]{8,21}$", description="Its ID, `fs-...`.")
    dns_name: str = Field(
        pattern=r"^fs-[0-9a-f]{8,21}\.fsx\.[a-z0-9-]+\.amazonaws\.com$",
        description="Its `DNSName` (`aws fsx describe-file-systems`), in the cluster's region.",
    )
    mount_name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,8}$", description="Its `LustreConfiguration.MountName`.")


class FsxSettings(Model):
    """Shared storage: FSx for Lustre, mounted in every team's namespace as the claim `fsx`."""

    enabled: bool = Field(
        default=False,
        description="Shared FSx for Lustre storage: the file system, the CSI driver add-on and a claim `fsx` in every team namespace.",
    )
    storage_gib: int = Field(
        default=1200, description="A new file system's size (PERSISTENT_2 SSD): 1200, 2400 or a multiple of 2400 GiB (FSx CreateFileSystem)."
    )
    throughput_per_tib: int = Field(default=250, description="MB/s per TiB of storage: 125, 250, 500 or 1000 (PERSISTENT_2).")
    availability_zone: Optional[str] = Field(
        default=None, description="Its AZ, which must have a HyperPod subnet; unset: the first HyperPod subnet's (the GPU AZ)."
    )
    existing: Optional[ExistingFileSystem] = Field(default=None, description="Use this file system instead of creating one.")
    directory_image: str = Field(
        default=PROBE_IMAGE,
        description="A small image with /bin/sh, mkdir and chmod, for the Job that makes each team's directory (each team "
        "mounts only its own); in a network without NAT, a copy in this account's ECR in the cluster's region.",
    )


FSX_THROUGHPUTS = (125, 250, 500, 1000)
    # What it needs beside it (the CSI driver; in a network without NAT, its directory image in
    # ECR): infra/prerequisites.py.
