"""The sample LLaMA FSDP job: model, data, tokenizer, placement and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import Field

from infra.config.base import Model
from training.model_shape import CUDA_CONTEXT_BYTES, FIT_SHARE, NCCL_GROUP_BYTES, RESERVED_PER_ESTIMATE


class DatasetSettings(Model):
    name: str = Field(default="allenai/c4", description="Hugging Face dataset, streamed.")
    config: Optional[str] = Field(default="en", description="Its config.")
    split: str = Field(default="train", description="Its split.")
    files: tuple[str, ...] = Field(
        default=(),
        description="Text files (glob patterns) under `/fsx/` on the shared file system, read instead of streaming `name` "
        "(needs `fsx.enabled`; the way to train in a closed network, or on a corpus of your own).",
    )


class SampleJobSettings(Model):
    enabled: bool = Field(default=True, description="Deploy the sample job (its stack, image, checkpoint bucket and role).")
    name: str = Field(default="llama3-1-8b-fsdp", description="Job name.")
    team: Optional[str] = Field(default=None, description="Team whose local queue the job joins.")
    priority: Optional[str] = Field(default=None, description="Priority class of the job (a `governance.priority_classes` name).")
    instance_group: str = Field(description="Instance group the job runs on.")
    nodes: int = Field(
        default=1, ge=1,
        description="Nodes (replicas), at most the group's count; an elastic job's fewest. Its team must be able to hold "
        "them (infra/admission.py); only by borrowing is a warning.",
    )
    max_nodes: Optional[int] = Field(
        default=None, ge=1,
        description="Elastic training (training operator v1.2+): the operator may scale the job from `nodes` up to this many "
        "and back, resuming each time from a checkpoint with the data position re-divided over the new ranks; needs "
        "`checkpoint_to` s3 or fsx. HyperPod's checkpointless training is documented as incompatible with elastic training "
        "(sagemaker-eks-checkpointless-considerations).",
    )
    model: Optional[Literal["llama3.1-8b", "tiny"]] = Field(
        default=None,
        description="Unset: `llama3.1-8b` where it fits the group's GPUs with a 5% margin, else `tiny`. A model that cannot fit "
        "is refused, one without the margin warned of, with the projection (docs/sample-job.md, Memory) against the GPU's memory.",
    )
    image_uri: Optional[str] = Field(
        default=None,
        description="A prebuilt training image (registry, repository and a tag or digest); unset: `cdk deploy` builds "
        "`training/` into ECR.",
    )
    dataset: DatasetSettings = Field(
        default=DatasetSettings(),
        description="What the job trains on: a Hugging Face dataset, streamed, or text files on FSx.",
    )
    tokenizer: str = Field(
        default="hf-internal-testing/llama-tokenizer",
        description="A Hugging Face tokenizer name (ungated by default; the real `meta-llama/Llama-3.1-8B` is gated and needs "
        "`hf_token_secret`) or, in a closed network, a path under `/fsx` where one is saved.",
    )
    hf_token_secret: Optional[str] = Field(
        default=None,
        description="Name of the AWS Secrets Manager secret (this account and region) that holds the Hugging Face token for "
        "a gated tokenizer: the deploy checks it exists before the job, and the job reads it at start with its own role "
        "(`aws secretsmanager create-secret --name <prefix>/<env>/hf-token --secret-string <token>`).",
    )
    gpu_partition: Optional[str] = Field(
        default=None,
        description="One MIG slice (e.g. `1g.10gb`) of a group whose `mig_profile` cuts its GPUs into it, instead of whole "
        "nodes: one process on one node, no EFA, `model: tiny` (the 8B's state does not fit a slice).",
    )
    gpus_per_node: Optional[int] = Field(default=None, description="Unset: from the instance catalogue; set, it must match the type.")
    efa_per_node: Optional[int] = Field(default=None, description="Unset: from the instance catalogue; set, it must match the type.")
    max_steps: int = Field(default=100, ge=1, le=10_000_000, description="Training steps.")
    checkpoint_interval_steps: int = Field(
        default=50, ge=1, description="Steps between checkpoints; keep a save every 10 minutes (the job's `CheckpointCadence` rule)."
    )
    checkpoint_to: Literal["s3", "fsx", "local"] = Field(
        default="s3",
        description="`s3`: the checkpoint bucket; `fsx`: the team's directory of the file system (needs `fsx.enabled`). "
        "`local` is refused: the pod's own scratch goes with the pod.",
    )
    keep_checkpoints: int = Field(
        default=3, ge=1, le=1000,
        description="Complete checkpoints kept; older ones are deleted after each save (S3 keeps noncurrent versions for the "
        "bucket's lifecycle window).",
    )


# The platform `cdk deploy` builds `training/` for (stacks/sample_job.py): its base image and
# wheels are amd64 builds, so a host of another architecture cannot exec it.
TRAINING_IMAGE_PLATFORM = "linux/amd64"


# What one GPU must hold: training/model_shape.py projected_per_gpu, from the estimate by parts to
# what the allocator holds on eight ranks (torchtitan's published 8-GPU figure), with the CUDA
# context and NCCL beside it; within FIT_SHARE of the GPU's memory (the MiB DescribeInstanceTypes
# states) a job fits with its margin, between that and the whole GPU it is tight (an explicit
# model gets a warning, an unset one the tiny model), over the whole GPU it is refused.
MIB, GIB = 2**20, 2**30


@dataclass(frozen=True)
class MemoryFit:
    """What `model` needs of one of the job's GPUs, projected (see RESERVED_PER_ESTIMATE), and
    the verdict: fits (within FIT_SHARE), tight (within the GPU) or never."""

    model: str
    where: str  # "ml.p4d.24xlarge's A100", "a 1g.10gb slice"
    ranks: int
    seq_len: int
    batch: int
    parts: dict
    projected: float
    memory: float  # bytes PyTorch reports (model_shape.torch_memory_mib)
    nominal: float = 0.0  # bytes DescribeInstanceTypes states (a slice: its share)
    stated: bool = True  # whether a source states what PyTorch reports (else it is assumed)

    @property
    def verdict(self) -> str:
        if self.projected <= FIT_SHARE * self.memory:
            return "fits"
        return "tight" if self.projected <= self.memory else "never"

    @property
    def margin(self) -> str:
        """The projection against the GPU, in words: what validate and render-job print."""
        return (f"{self.model} needs about {_gib(self.projected)} of the {self.seen} per GPU over {self.ranks} "
                f"rank{'s' * (self.ranks > 1)} ({self.projected / self.memory:.0%}, margin {_gib(self.memory - self.projected)})")

    @property
    def seen(self) -> str:
        """The memory the projection is held to, in words: what PyTorch reports of the GPU, and how that is known."""
        from training.model_shape import SLICE_SHORTFALL, UNRECORDED_SHORTFALL

        assumed = SLICE_SHORTFALL if self.where.endswith(" slice") else UNRECORDED_SHORTFALL
        how = "" if self.stated else f", less {assumed:.0%} assumed"
        return f"{_gib(self.memory)} PyTorch sees of {self.where} ({_gib(self.nominal)} nominal{how})"

    @property
    def reasoning(self) -> str:
        estimate = sum(self.parts.values())
        return (
            f"at sequence {self.seq_len} x batch {self.batch}: an estimate of {_gib(estimate)} (weights, gradients and Adam states "
            f"{_gib(self.parts['state'])} sharded, gathered FSDP units {_gib(self.parts['gathered'])}, activations "
            f"{_gib(self.parts['activations'])}) x{RESERVED_PER_ESTIMATE} for what the allocator holds on eight ranks "
            f"(torchtitan's published 8-GPU figure), with the CUDA context{' and NCCL' if self.ranks > 1 else ''} beside it"
        )


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"
