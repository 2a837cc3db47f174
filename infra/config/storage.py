"""Shared storage: FSx for Lustre, new or existing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from infra.config.acceptance import PROBE_IMAGE
from infra.config.base import Model, Problems

if TYPE_CHECKING:
    from infra.config.settings import Settings


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


def check_fsx(s: Settings, p: Problems) -> None:
    fsx = s.fsx
    if not fsx.enabled:
        return
    if fsx.existing is None:
        if fsx.storage_gib not in (1200, 2400) and (fsx.storage_gib < 2400 or fsx.storage_gib % 2400):
            p.error("fsx.storage_gib", fsx.storage_gib, "must be 1200, 2400 or a multiple of 2400 GiB (PERSISTENT_2 SSD)")
        if fsx.throughput_per_tib not in FSX_THROUGHPUTS:
            p.error("fsx.throughput_per_tib", fsx.throughput_per_tib, f"must be one of {', '.join(map(str, FSX_THROUGHPUTS))} MB/s/TiB (PERSISTENT_2)")
    elif fsx.existing.file_system_id not in fsx.existing.dns_name:
        p.error("fsx.existing.dns_name", fsx.existing.dns_name, f"is not the DNS name of {fsx.existing.file_system_id}")
    elif fsx.existing.dns_name.split(".")[2] != s.region:
        # <id>.fsx.<region>.amazonaws.com: a file system serves clients in its own region only.
        p.error("fsx.existing.dns_name", fsx.existing.dns_name, f"is a file system in {fsx.existing.dns_name.split('.')[2]}; the cluster is in {s.region}")
    hp_azs = [sn.availability_zone for sn in s.network.hyperpod_subnets]
    if fsx.availability_zone is not None and fsx.availability_zone not in hp_azs:
        p.error("fsx.availability_zone", fsx.availability_zone, f"has no HyperPod subnet; subnets exist in: {', '.join(hp_azs)}")
    # What it needs beside it (the CSI driver; in a network without NAT, its directory image in
    # ECR): infra/prerequisites.py.
