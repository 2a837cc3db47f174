"""Shared storage's checks: FSx for Lustre's size and throughput, an existing file system in the
cluster's region, its zone among the HyperPod subnets'."""

from __future__ import annotations

from infra.config.base import Problems
from infra.config.settings import Settings
from infra.config.storage import FSX_THROUGHPUTS


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
