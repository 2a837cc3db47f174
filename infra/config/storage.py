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

    file_system_id: str = Field(pattern=r"^fs-[0-9a-f]{8,21}$")
    # From `aws fsx describe-file-systems`: DNSName and LustreConfiguration.MountName.
    dns_name: str = Field(pattern=r"^fs-[0-9a-f]{8,21}\.fsx\.[a-z0-9-]+\.amazonaws\.com$")
    mount_name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,8}$")


class FsxSettings(Model):
    """Shared storage: FSx for Lustre, mounted in every team's namespace as the claim `fsx`."""

    enabled: bool = False
    # A new file system (PERSISTENT_2): 1200 or 2400 GiB, then steps of 2400 (FSx CreateFileSystem).
    storage_gib: int = 1200
    # MB/s per TiB of storage: PERSISTENT_2 offers 125, 250, 500 and 1000.
    throughput_per_tib: int = 250
    # Its AZ; it must have a HyperPod subnet. None: the first HyperPod subnet's (the GPU AZ).
    availability_zone: Optional[str] = None
    # Use this file system instead of creating one.
    existing: Optional[ExistingFileSystem] = None
    # A small image with /bin/sh, mkdir and chmod, for the Job that makes each team's directory
    # (each team mounts only its own); in a network without NAT, a copy in this account's ECR; an
    # image reference (infra/config/limits.py).
    directory_image: str = PROBE_IMAGE


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
