"""The acceptance run (`hyperpod-cdk accept`): which GPU groups it proves, with which images,
and how close to the published bus bandwidth a fabric must come."""

from __future__ import annotations


from pydantic import Field

from infra.config.base import Model


# The awsome NCCL test image on AWS's public gallery, as its EKS manifest names it
# (micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml at commit c428b24) with the
# README's pinned set: CUDA 13.1.2, EFA installer 1.50.0, aws-ofi-nccl 1.21.1, NCCL 2.31.2-1,
# nccl-tests 2.20.0 (README at commit 0b55ba5; it says to use the tag once it is published).
NCCL_TESTS_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests:cuda13.1.2-efa1.50.0-ofiv1.21.1-ncclv2.31.2-1-testsv2.20.0"
# NVIDIA's DCGM container on NGC (nv-hostengine and dcgmi), a tag public GPU-cluster scripts run.
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
# Docker's official busybox on AWS's public gallery.
PROBE_IMAGE = "public.ecr.aws/docker/library/busybox:1.37.0"


class AcceptanceSettings(Model):
    instance_groups: tuple[str, ...] = Field(
        default=(), description="The GPU groups to prove; empty: every group of whole NVIDIA GPUs (not cut into MIG slices)."
    )
    nccl_image: str = Field(
        default=NCCL_TESTS_IMAGE,
        description="The awsome NCCL test image; in a network without NAT, a copy in this account's ECR in the cluster's "
        "region (`validate` warns, `accept` refuses).",
    )
    dcgm_image: str = Field(
        default=DCGM_IMAGE, description="NVIDIA's DCGM image (`nv-hostengine`, `dcgmi`); in a network without NAT, a copy as for `nccl_image`."
    )
    min_bandwidth_percent: int = Field(
        default=90, ge=1, le=100, description="A fabric passes at this share of the published bus bandwidth for its instance type."
    )
    deep_health_check: bool = Field(
        default=True, description="Also run HyperPod's on-demand deep health check (StartClusterHealthCheck) on types that have one."
    )
    probe_image: str = Field(
        default=PROBE_IMAGE,
        description="A small image with a shell, wget and httpd (busybox) for the tenancy probes in each team's namespace; in "
        "a network without NAT, a copy as for `nccl_image`.",
    )


def unprovable(group) -> str | None:
    """Why the acceptance run cannot prove a group's GPUs (None: it can), worded to follow
    "is": NCCL and DCGM need whole NVIDIA GPUs, and the run is sized from the type's figures."""
    spec = group.spec
    if spec.unknown:
        return f"{group.instance_type}, whose {', '.join(spec.unknown)} no source here states; the run is sized from them"
    if not spec.is_accelerated or spec.accelerator_resource != "nvidia.com/gpu":
        return f"{group.instance_type}, which has no NVIDIA GPUs for NCCL and DCGM to test"
    if group.mig_profile:
        return f"cut into MIG slices ({group.mig_profile}): NCCL does not span slices and DCGM's diagnostics need whole GPUs"
    return None
