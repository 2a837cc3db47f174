"""Every instance type SageMaker HyperPod takes, and what each one offers.

The types are SageMaker's own `ClusterInstanceType` enum (botocore's sagemaker service model);
their figures (vCPUs, memory, GPUs or Neuron devices and their memory, EFA interfaces) are EC2's
DescribeInstanceTypes output as moto ships it (moto/ec2/resources/instance_types.json.gz), both
read from .venv into `instance_types.json` beside this module (`python -m infra.catalogue
refresh` writes it; a test holds it against both). A type none of them describes is still a
type HyperPod takes: it is accepted, and validation warns which figures cannot be checked.

What holds per family, from the documentation that states it: deep health checks on
accelerated p and trn types (HyperPod deep-health-check docs), RDMA read
on p4d, p5, p5e, p5en, p6 and Trainium (EFA docs), UltraServers (p6e-gb200, trn2u). MIG
profiles per GPU come from NVIDIA's MIG user guide. What holds per exact type: EC2 topology
(TOPOLOGY_TYPES, from EC2's instance topology prerequisites: p5.48xlarge has it, p5.4xlarge not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

# The extended resource the EFA device plugin advertises.
EFA_RESOURCE = "vpc.amazonaws.com/efa"
NVIDIA_GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neuron"

DATA = Path(__file__).with_name("instance_types.json")
TYPES_SOURCE = "botocore's sagemaker service model, shape ClusterInstanceType"
FIGURES_SOURCE = "EC2 DescribeInstanceTypes output as moto ships it (moto/ec2/resources/instance_types.json.gz)"

# Families by what the documentation says of them.
DEEP_HEALTH_CHECK_PREFIXES = ("p", "trn")  # accelerated only
# The exact EC2 types whose instances have a topology (network nodes, which HyperPod labels
# topology.k8s.aws/network-node-layer-N): EC2's own list, by type, not by family (ml.p5.4xlarge
# has none; p5.48xlarge has). HyperPod's topology-aware scheduling page defers to it.
TOPOLOGY_SOURCE = (
    "EC2 user guide, Prerequisites for Amazon EC2 topology, Instance types (ec2-instance-topology-prerequisites; the "
    "docs.amazonaws.cn zh_cn copy, the newest text stored, read 2026-12; the older English copies list a subset)"
)
TOPOLOGY_TYPES = frozenset({
    # "Returns 3 network nodes"
    *(f"g6e.{size}" for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")),
    *(f"g7e.{size}" for size in ("2xlarge", "4xlarge", "8xlarge", "12xlarge", "24xlarge", "48xlarge")),
    "hpc6a.48xlarge", "hpc6id.32xlarge", "hpc7g.4xlarge", "hpc7g.8xlarge", "hpc7g.16xlarge",
    "hpc7a.12xlarge", "hpc7a.24xlarge", "hpc7a.48xlarge", "hpc7a.96xlarge",
    "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6e-gb200.36xlarge",
    "trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge",
    # "Returns 4 network nodes"
    "p6-b200.48xlarge", "p6-b300.48xlarge",
})
RDMA_READ_FAMILIES = frozenset({"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200", "trn1", "trn1n", "trn2", "trn2u"})
ULTRASERVER_FAMILIES = frozenset({"p6e-gb200", "trn2u"})

# Types the EC2 data moto ships leaves out, with the figures of a page that states them.
_AWS_GB200_POST = (
    "EC2 accelerated-computing instance specifications (p6e-gb200.36xlarge: 144 vCPUs, 960 GiB, 4 GB200 GPUs) and the "
    "AWS Machine Learning blog 'Train and deploy AI models at trillion-parameter scale with Amazon SageMaker HyperPod "
    "support for P6e-GB200 UltraServers' (2025-08-13: up to 17 EFA network cards per node)"
)
# The GPU's memory from NVIDIA's MIG user guide ("Supported GPUs": GB200 186GB), whose "GB" are GiB
# as DescribeInstanceTypes states the others (H200 141GB: 144,384 MiB).
_GB200_MIB = 186 * 1024
BEYOND_THE_DATA = MappingProxyType({
    "ml.p6e-gb200.36xlarge": (
        {"vcpus": 144, "memory_mib": 960 * 1024, "efa": 17, "gpu": ["GB200", 4, _GB200_MIB], "arch": "arm64"},
        f"{_AWS_GB200_POST}; GPU memory: NVIDIA MIG user guide, Supported GPUs (GB200 186GB); arm64: its CPUs are NVIDIA Grace "
        "(Arm Neoverse V2), the GB200 superchip's, as the EC2 P6e-GB200 page states",
    ),
})


@dataclass(frozen=True)
class InstanceType:
    name: str
    # None: no source here states it (validation warns what cannot be checked).
    vcpus: int | None
    memory_gib: int | None
    accelerators: int | None = 0
    accelerator: str = ""
    # The extended resource the device plugin advertises for the accelerator.
    accelerator_resource: str = NVIDIA_GPU
    # One GPU's memory in MiB, as DescribeInstanceTypes' GpuInfo MemoryInfo SizeInMiB states it
    # (None: no source states it).
    accelerator_memory_mib: int | None = None
    efa_interfaces: int | None = 0
    topology: bool = False
    deep_health_checks: bool = False
    # EFA with RDMA read (FI_EFA_USE_DEVICE_RDMA=1); elsewhere libfabric aborts with it set.
    efa_rdma_read: bool = False
    # Part of an EC2 UltraServer: its nodes carry the topology.k8s.aws/ultraserver-id label.
    ultraserver: bool = False
    # The CPU architecture its hosts run images for ("x86_64" or "arm64", DescribeInstanceTypes'
    # ProcessorInfo.SupportedArchitectures); None: no source here states it.
    architecture: str | None = None
    source: str = FIGURES_SOURCE

    @property
    def is_accelerated(self) -> bool:
        return bool(self.accelerators)

    @property
    def unknown(self) -> tuple[str, ...]:
        """The figures no source here states (empty: every figure is known)."""
        missing = {"vCPUs": self.vcpus, "memory": self.memory_gib, "accelerators": self.accelerators, "EFA interfaces": self.efa_interfaces}
        if self.is_accelerated and self.accelerator_resource == NVIDIA_GPU:
            missing["GPU memory"] = self.accelerator_memory_mib
        return tuple(name for name, value in missing.items() if value is None)

    @property
    def mig_profiles(self) -> dict[str, int]:
        """The MIG profiles one of its GPUs can be cut into, and how many of each fit one GPU
        (empty: NVIDIA's guide gives its GPU none)."""
        return MIG_PROFILES.get(self.accelerator, {})

    def mig_memory_mib(self, profile: str) -> int | None:
        """A slice's memory in MiB: its share of the GPU's (mig_memory_eighths), None where the
        GPU does not offer the profile or its memory is not known."""
        if profile not in self.mig_profiles or self.accelerator_memory_mib is None:
            return None
        return self.accelerator_memory_mib * mig_memory_eighths(self.accelerator, profile) // MIG_MEMORY_SLICES

    @property
    def device_resources(self) -> dict[str, int]:
        """The extended resources a node of this type advertises once the chart's device
        plugins run, per node: what a job sized to the whole node asks for."""
        out = {self.accelerator_resource: self.accelerators} if self.is_accelerated else {}
        if self.efa_interfaces:
            out[EFA_RESOURCE] = self.efa_interfaces
        return out


# MIG profiles per GPU and how many of each one GPU holds (NVIDIA MIG user guide, "Supported
# MIG Profiles", read 2026-12: A100 40GB, A100 80GB, H100 80GB, H200 141GB, B200 180GB, GB200
# 186GB). Prefixed with "mig-", these are exactly the 28 values AWS::SageMaker::ComputeQuota
# takes as AcceleratorPartition.Type (a test holds them together). GPUs the guide, as read, gives
# no profiles (A10G, L4, L40S, T4, B300, the RTX PRO parts) are not cut here.
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


# A slice's memory. A GPU's memory is cut into eight slices, and NVIDIA's MIG user guide names
# each profile by its memory in GB, the whole-GPU profile by the GPU's ("Supported MIG Profiles":
# "Fraction of Memory" 1/8, 2/8, 4/8 or Full); so a profile holds its GB over the whole GPU's, to
# the nearest eighth (A100 1g.10gb: 10/40 = 2/8, as `nvidia-smi mig -lgipp` counts its slices in
# the guide's "Getting Started with MIG"), of the MiB DescribeInstanceTypes states for the GPU.
# The driver keeps a little of each, as of a whole GPU (the same page on an A100-SXM4-40GB:
# 1g.5gb 4.75 GiB, 7g.40gb 39.25, the whole GPU 40537 MiB); the fit check's margin covers it
# (training/model_shape.py FIT_SHARE).
MIG_MEMORY_SLICES = 8


def _profile_gb(profile: str) -> int:
    return int(profile.split(".", 1)[1].removesuffix("gb"))


def mig_memory_eighths(gpu: str, profile: str) -> int:
    """The eighths of `gpu`'s memory a slice of `profile` holds: 1g.10gb on an A100 (40 GB) -> 2."""
    whole = max(_profile_gb(p) for p in MIG_PROFILES[gpu])
    return round(MIG_MEMORY_SLICES * _profile_gb(profile) / whole)


def _gpu_label(name: str, memory_mib: int | None) -> str:
    # NVIDIA's MIG tables tell the A100s apart by memory (A100-SXM4-40GB, A100-SXM4-80GB);
    # DescribeInstanceTypes names both "A100".
    return "A100-80GB" if name == "A100" and (memory_mib or 0) >= 80 * 1024 else name


def family(name: str) -> str:
    """ml.p5.48xlarge -> p5."""
    return name.removeprefix("ml.").split(".", 1)[0]


def _build(name: str, row: dict | None, source: str) -> InstanceType:
    row = row or {}
    fam = family(name)
    gpu, neuron = row.get("gpu"), row.get("neuron")
    accelerators = gpu[1] if gpu else neuron[1] if neuron else (0 if row else None)
    if gpu:
        label = _gpu_label(gpu[0], gpu[2])
        accelerator, resource, memory = label, NVIDIA_GPU, gpu[2]
    elif neuron:
        accelerator, resource, memory = neuron[0], NEURON, None
    else:
        accelerator, resource, memory = "", NVIDIA_GPU, None
    mib = row.get("memory_mib")
    accelerated = bool(accelerators)
    return InstanceType(
        name,
        row.get("vcpus"),
        mib // 1024 if mib else None,
        accelerators,
        accelerator,
        resource,
        memory,
        row.get("efa", None if not row else 0),
        topology=name.removeprefix("ml.") in TOPOLOGY_TYPES,
        deep_health_checks=accelerated and fam.startswith(DEEP_HEALTH_CHECK_PREFIXES),
        efa_rdma_read=fam in RDMA_READ_FAMILIES,
        ultraserver=fam in ULTRASERVER_FAMILIES,
        architecture=row.get("arch") if row else None,
        source=source if row else f"no source here: not in {FIGURES_SOURCE}",
    )


def _load() -> tuple[MappingProxyType, dict]:
    data = json.loads(DATA.read_text())
    types = {}
    for name, row in data["types"].items():
        extra = BEYOND_THE_DATA.get(name)
        types[name] = _build(name, extra[0], extra[1]) if row is None and extra else _build(name, row, FIGURES_SOURCE)
    return MappingProxyType(types), data["read"]


CATALOGUE, READ = _load()

# The observability add-on's collectors need a node of at least this size (4xlarge: 16 vCPUs).
OBSERVABILITY_MIN_VCPUS = 16


def lookup(name: str) -> InstanceType | None:
    """The type, if SageMaker HyperPod takes it (its figures may be unknown: InstanceType.unknown)."""
    return CATALOGUE.get(name)


def figures(name: str) -> InstanceType | None:
    """The type when every figure of it is known: what arithmetic over types may use."""
    spec = CATALOGUE.get(name)
    return spec if spec is not None and not spec.unknown else None


# ---------------------------------------------------------------------- the data file


def rows(enum: list[str], ec2: dict) -> dict[str, dict | None]:
    """One row per ClusterInstanceType (None where EC2's data has no such type): what
    `instance_types.json` holds, from the enum and DescribeInstanceTypes output."""
    out = {}
    for name in enum:
        it = ec2.get(name.removeprefix("ml."))
        if it is None:
            out[name] = None
            continue
        row = {"vcpus": it["VCpuInfo"]["DefaultVCpus"], "memory_mib": it["MemoryInfo"]["SizeInMiB"],
               "efa": it["NetworkInfo"].get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
               "arch": "arm64" if it["ProcessorInfo"]["SupportedArchitectures"] == ["arm64"] else "x86_64"}
        gpus = it.get("GpuInfo", {}).get("Gpus", [])
        devices = it.get("NeuronInfo", {}).get("NeuronDevices", [])
        if gpus:
            row["gpu"] = [gpus[0]["Name"], sum(g["Count"] for g in gpus), gpus[0].get("MemoryInfo", {}).get("SizeInMiB")]
        elif devices:
            row["neuron"] = [devices[0]["Name"], sum(d["Count"] for d in devices)]
        out[name] = row
    return out


def sources() -> tuple[list[str], dict, str]:
    """(the enum, EC2's instance-type data, where they were read): botocore's and moto's, from .venv."""
    import gzip
    from importlib.metadata import version

    import botocore.session
    import moto

    enum = botocore.session.get_session().get_service_model("sagemaker").shape_for("ClusterInstanceType").enum
    with gzip.open(Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz") as f:
        ec2 = json.load(f)
    return list(enum), ec2, f"botocore {version('botocore')}, moto {version('moto')}"


def _refresh(read: str) -> None:
    enum, ec2, where = sources()
    body = ",\n".join(f"    {json.dumps(name)}: {json.dumps(row)}" for name, row in rows(enum, ec2).items())
    DATA.write_text(
        f'{{\n  "types_source": {json.dumps(TYPES_SOURCE)},\n  "figures_source": {json.dumps(FIGURES_SOURCE)},\n'
        f'  "read_from": {json.dumps(where)},\n  "read": {json.dumps(read)},\n  "types": {{\n{body}\n  }}\n}}\n'
    )


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


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    import datetime
    import sys

    if sys.argv[1:] != ["refresh"]:
        sys.exit("usage: python -m infra.catalogue refresh")
    _refresh(datetime.date.today().isoformat())
    print(f"wrote {DATA}")
