"""The HyperPod instance types this package knows, and what each one offers.

Validation uses it to reject unknown types, deep health checks where they cannot run and
required topology where EC2 publishes no network-node labels; the sample job takes its
GPU and EFA counts from it.

Sources: the EC2 accelerated-computing instance specifications (GPUs, EFA interfaces),
the HyperPod deep-health-check documentation (accelerated types only), the EC2
instance-topology documentation (p4d/p4de/p5/p5e/p5en/p6e-gb200/trn1/trn1n/trn2/trn2u) and
the EFA documentation for RDMA read (p4d, p5, p5e, p5en, p6 and Trainium).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


# The extended resource the EFA device plugin advertises.
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    accelerators: int = 0
    accelerator: str = ""
    # The extended resource the device plugin advertises for the accelerator.
    accelerator_resource: str = "nvidia.com/gpu"
    efa_interfaces: int = 0
    topology: bool = False
    deep_health_checks: bool = False
    # EFA with RDMA read (FI_EFA_USE_DEVICE_RDMA=1); elsewhere libfabric aborts with it set.
    efa_rdma_read: bool = False
    # Part of an EC2 UltraServer: its nodes carry the topology.k8s.aws/ultraserver-id label.
    ultraserver: bool = False

    @property
    def is_accelerated(self) -> bool:
        return self.accelerators > 0

    @property
    def mig_profiles(self) -> dict[str, int]:
        """The MIG profiles one of its GPUs can be cut into, and how many of each fit one GPU
        (empty: the GPU has no MIG)."""
        return MIG_PROFILES.get(self.accelerator, {})

    @property
    def device_resources(self) -> dict[str, int]:
        """The extended resources a node of this type advertises once the chart's device
        plugins run, per node: what a job sized to the whole node asks for."""
        out = {self.accelerator_resource: self.accelerators} if self.is_accelerated else {}
        if self.efa_interfaces:
            out[EFA_RESOURCE] = self.efa_interfaces
        return out

    @property
    def size_rank(self) -> int:
        """vCPUs stand in for size: 4xlarge has 16, which the observability add-on needs."""
        return self.vcpus


def _gpu(name, vcpus, mem, gpus, gpu, efa, *, topology=False, dhc=True, rdma=False):
    return InstanceType(name, vcpus, mem, gpus, gpu, "nvidia.com/gpu", efa, topology, dhc, rdma)


def _neuron(name, vcpus, mem, chips, chip, efa):
    return InstanceType(name, vcpus, mem, chips, chip, "aws.amazon.com/neuron", efa, True, True, True)


def _cpu(name, vcpus, mem):
    return InstanceType(name, vcpus, mem)


_TYPES = (
    _gpu("ml.p4d.24xlarge", 96, 1152, 8, "A100", 4, topology=True, rdma=True),
    _gpu("ml.p4de.24xlarge", 96, 1152, 8, "A100-80GB", 4, topology=True, rdma=True),
    _gpu("ml.p5.48xlarge", 192, 2048, 8, "H100", 32, topology=True, rdma=True),
    _gpu("ml.p5e.48xlarge", 192, 2048, 8, "H200", 32, topology=True, rdma=True),
    _gpu("ml.p5en.48xlarge", 192, 2048, 8, "H200", 16, topology=True, rdma=True),
    _gpu("ml.p6-b200.48xlarge", 192, 2048, 8, "B200", 8, rdma=True),
    InstanceType("ml.p6e-gb200.36xlarge", 144, 960, 4, "GB200", "nvidia.com/gpu", 17, True, True, True, True),
    _gpu("ml.g5.8xlarge", 32, 128, 1, "A10G", 1, dhc=False),
    _gpu("ml.g5.12xlarge", 48, 192, 4, "A10G", 1, dhc=False),
    _gpu("ml.g5.24xlarge", 96, 384, 4, "A10G", 1, dhc=False),
    _gpu("ml.g5.48xlarge", 192, 768, 8, "A10G", 1, dhc=False),
    _gpu("ml.g6.8xlarge", 32, 128, 1, "L4", 1, dhc=False),
    _gpu("ml.g6.12xlarge", 48, 192, 4, "L4", 1, dhc=False),
    _gpu("ml.g6.48xlarge", 192, 768, 8, "L4", 1, dhc=False),
    _gpu("ml.g6e.12xlarge", 48, 384, 4, "L40S", 1, dhc=False),
    _gpu("ml.g6e.48xlarge", 192, 1536, 8, "L40S", 4, dhc=False),
    _neuron("ml.trn1.32xlarge", 128, 512, 16, "Trainium", 8),
    _neuron("ml.trn1n.32xlarge", 128, 512, 16, "Trainium", 16),
    _neuron("ml.trn2.48xlarge", 192, 2048, 16, "Trainium2", 16),
    _cpu("ml.m5.xlarge", 4, 16),
    _cpu("ml.m5.2xlarge", 8, 32),
    _cpu("ml.m5.4xlarge", 16, 64),
    _cpu("ml.m5.8xlarge", 32, 128),
    _cpu("ml.m5.12xlarge", 48, 192),
    _cpu("ml.m5.16xlarge", 64, 256),
    _cpu("ml.m5.24xlarge", 96, 384),
    _cpu("ml.c5.4xlarge", 16, 32),
    _cpu("ml.c5.9xlarge", 36, 72),
    _cpu("ml.c5.18xlarge", 72, 144),
    _cpu("ml.t3.xlarge", 4, 16),
    _cpu("ml.t3.2xlarge", 8, 32),
)

# MIG profiles per GPU and how many of each one GPU holds (NVIDIA MIG user guide, "Supported
# MIG Profiles", read 2026-12: A100 40GB, A100 80GB, H100 80GB, H200 141GB, B200 180GB, GB200
# 186GB). A10G, L4 and L40S have no MIG. Prefixed with "mig-", these are exactly the 28 values
# AWS::SageMaker::ComputeQuota takes as AcceleratorPartition.Type (a test holds them together).
_A100_80 = {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
MIG_PROFILES: MappingProxyType[str, dict[str, int]] = MappingProxyType({
    "A100": {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    "A100-80GB": _A100_80,
    "H100": _A100_80,
    "H200": {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
    "B200": {"1g.23gb": 7, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1},
    "GB200": {"1g.23gb": 7, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1, "7g.186gb": 1},
})
# The extended resource the GPU operator's device plugin advertises for a slice (mixed strategy).
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def mig_memory_gb(profile: str) -> int:
    """The memory of a slice, from its name: 1g.10gb -> 10."""
    return int(profile.split(".", 1)[1].removesuffix("gb"))


# Memory of one GPU without MIG, GB (EC2 accelerated-computing instance specifications: g5's
# A10G 24 GB, g6's L4 24 GB, g6e's L40S 48 GB). A GPU with MIG has its whole-GPU profile's.
_GPU_MEMORY_GB = {"A10G": 24, "L4": 24, "L40S": 48}


def gpu_memory_gb(accelerator: str) -> int | None:
    """One GPU's memory: A100 40, A100-80GB and H100 80, H200 141, B200 180, GB200 186."""
    profiles = MIG_PROFILES.get(accelerator)
    if profiles:
        return max(mig_memory_gb(p) for p in profiles)
    return _GPU_MEMORY_GB.get(accelerator)


CATALOGUE: MappingProxyType[str, InstanceType] = MappingProxyType({t.name: t for t in _TYPES})

# The observability add-on's collectors need a node of at least this size (4xlarge: 16 vCPUs).
OBSERVABILITY_MIN_VCPUS = 16


def lookup(name: str) -> InstanceType | None:
    return CATALOGUE.get(name)


@dataclass(frozen=True)
class PublishedBusBandwidth:
    """What NCCL's all_reduce_perf reached over EFA on this type in a published run: the bus
    bandwidth (GB/s, out-of-place) at the run's largest message. Bus bandwidth compares
    "independently to the number of ranks used" (the awsome README's "Understanding NCCL
    Bandwidth"), so a two-node figure is the expectation for any number of nodes."""

    busbw_gbps: float
    message_bytes: int
    nodes: int
    source: str
    published: str


_AWSOME_NCCL = ("awslabs/awsome-distributed-ai micro-benchmarks/nccl-tests/README.md, section Results "
                "(added in commit 88c2e71; read at snapshot 95b939c, 2026-07-23)")

# The only per-type results the references publish (none for p4d, p5e, p5en, p6 or Trainium):
# acceptance judges these types and reports the others' figures unjudged.
NCCL_ALL_REDUCE_BUSBW: MappingProxyType[str, PublishedBusBandwidth] = MappingProxyType({
    # "2x p4de.24xlarge", 8 B to 2 GiB: 78.33 GB/s at 2147483648 B.
    "ml.p4de.24xlarge": PublishedBusBandwidth(78.33, 2 * 1024**3, 2, _AWSOME_NCCL, "2024-04-19"),
    # "2x p5.48xlarge", 8 B to 16 GiB: 487.09 GB/s at 17179869184 B.
    "ml.p5.48xlarge": PublishedBusBandwidth(487.09, 16 * 1024**3, 2, _AWSOME_NCCL, "2024-04-19"),
})
