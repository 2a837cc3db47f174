"""The model presets and the arithmetic on them: parameter counts, FLOPs per token, MFU.

No third-party imports: train.py uses it in the image, and manifests/job.py sizes the
throughput log rule from it without torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Preset:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int
    rope_theta: float
    vocab: int  # the published vocabulary; the embedding follows the tokenizer in use
    rms_norm_eps: float = 1e-5
    rope_scaling: dict | None = field(default=None, hash=False)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


PRESETS = {
    # LLaMA 3.1 8B, as meta-llama/Llama-3.1-8B publishes it (config.json).
    "llama3.1-8b": Preset(
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        max_positions=131072,
        rope_theta=500000.0,
        vocab=128256,
        rms_norm_eps=1e-5,
        rope_scaling=MappingProxyType(
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            }
        ),
    ),
    # Small enough to train on a laptop CPU in seconds, same architecture.
    "tiny": Preset(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, max_positions=256, rope_theta=10000.0, vocab=300),
}

# Peak dense (no sparsity) bf16 TFLOPS per device, from the vendors' data sheets; GB200 from
# torchtitan (torchtitan/tools/utils.py get_peak_flops: 2.5e15, half of DGX GB200's 5,000
# TFLOPS with sparsity), where B200 has 2,250. The H100's variants each have their own (NVIDIA's
# H100 data sheet; torchtitan's get_peak_flops the same): SXM 989 (CUDA names it "NVIDIA H100 80GB
# HBM3"; p5's), NVL 835, PCIe 756. A key of several words is a variant: every word in the name.
PEAK_TFLOPS = {
    "H100": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "H200": 989.0,
    "A100": 312.0,
    "A10G": 70.0,
    "L4": 121.0,
    "L40S": 362.0,
    "B200": 2250.0,
    "GB200": 2500.0,
}


def peak_tflops(device_name: str) -> float | None:
    """The table's GPU named as whole words of `device_name`, its variant where the name says one:
    CUDA's names ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB") and the
    catalogue's ("A100-80GB"). Whole words, so "NVIDIA GB200" is not a B200 and "NVIDIA L40S" not an L4."""
    words = set(re.split(r"[^A-Z0-9]+", device_name.upper()))
    found = [key for key in PEAK_TFLOPS if set(key.upper().split()) <= words]
    return PEAK_TFLOPS[max(found, key=lambda key: len(key.split()))] if found else None


def parameters(preset: Preset, vocab: int) -> tuple[int, int]:
    """(all parameters, those outside the input embedding), counted from the shape: per
    layer the q/k/v/o projections, the SwiGLU MLP and two RMSNorms; then the final norm and
    the untied output head."""
    h, kv = preset.hidden, preset.kv_heads * preset.head_dim
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * preset.intermediate + 2 * h
    non_embedding = preset.layers * per_layer + h + h * vocab
    return non_embedding + vocab * h, non_embedding


def flops_per_token(preset: Preset, vocab: int, seq_len: int) -> float:
    """Training FLOPs per token as torchtitan counts them: 6 x the non-embedding parameters
    plus 12 x layers x heads x head_dim x sequence for attention (causality not discounted)."""
    _, non_embedding = parameters(preset, vocab)
    return 6 * non_embedding + 12 * preset.layers * preset.heads * preset.head_dim * seq_len


def mfu(tokens_per_s: float, preset: Preset, vocab: int, seq_len: int, devices: int, peak: float) -> float:
    """Model FLOPs utilisation; tokens_per_s over all `devices`, `peak` in TFLOPS per device."""
    return tokens_per_s * flops_per_token(preset, vocab, seq_len) / (devices * peak * 1e12)


# What the sample job trains with (manifests/job.py passes them; the config's memory check
# sizes the job with them): the 8B at its pretraining context, the tiny preset at its longest.
JOB_SEQ_LEN = MappingProxyType({"llama3.1-8b": 8192, "tiny": 256})
JOB_BATCH = 1  # sequences per GPU per step
# Warm-up as a share of the job's steps: the 8B's as torchtitan's Llama 3 8B recipe warms up
# (train_configs/llama3_8b.toml: 200 of 1,000 steps at lr 3e-4, batch 1, sequence 8192), the
# tiny preset's as train.py's default does over the dev job's 200 steps.
JOB_WARMUP_SHARE = MappingProxyType({"llama3.1-8b": 0.2, "tiny": 0.05})


def job_warmup_steps(model: str, max_steps: int) -> int:
    return max(1, round(JOB_WARMUP_SHARE[model] * max_steps))


# The global batch, in tokens, the project takes the 8B's learning rate (3e-4) to be given for: its
# choice, read from torchtitan's note that its Llama 3 8B toml is "a preset for 64 A100 GPUs" (the
# first line) at batch 1 x sequence 8192 = 524,288 tokens. torchtitan itself scales nothing: its
# recipe trains at 3e-4 on however many GPUs run it (65,536 tokens a step on one 8-GPU node). A job
# on another global batch trains at 3e-4 x sqrt(its batch / this) (train.lr_scale): prod's 16 H100
# at 131,072 tokens, 1.5e-4, half the recipe's rate. The tiny preset's learning rate is for
# whatever global batch its first run has.
JOB_LR_BATCH_TOKENS = MappingProxyType({"llama3.1-8b": 64 * 1 * 8192})

# Bytes per parameter of the training state, whatever the sharding: fp32 weights and
# gradients, and AdamW's two fp32 moments (train.py's optimizer, and FSDP's sharded fp32
# master weights under bf16 mixed precision).
STATE_BYTES_PER_PARAMETER = 16


# The loss, as train.py computes it (next_token_loss) and as transformers' own causal-LM loss
# does (transformers 4.53.3 loss/loss_utils.py ForCausalLMLoss: "Upcast to float"): in forward
# the logits in the compute dtype, their fp32 copy (none where compute is fp32 already) and the
# log-probabilities cross_entropy's log_softmax saves for backward; in backward those
# log-probabilities, their gradient and the logits' fp32 gradient. Bytes per token and
# vocabulary entry, the larger of the two passes.
LOSS_BACKWARD_FP32_TENSORS = 3


def loss_bytes_per_logit(compute_bytes: int) -> int:
    forward = compute_bytes + (4 if compute_bytes != 4 else 0) + 4
    return max(forward, LOSS_BACKWARD_FP32_TENSORS * 4)


def memory_per_gpu(preset: Preset, vocab: int, *, seq_len: int, batch: int, ranks: int, compute_bytes: int = 2,
                   checkpointed: bool = True) -> dict[str, float]:
    """Bytes one GPU holds at its peak when train.py trains `preset` as the job runs it: FSDP
    full sharding over `ranks`, the embedding and the head their own units (--fsdp-units
    tuned), bf16 compute (`compute_bytes`) and, `checkpointed`, full activation
    checkpointing. An estimate, by parts:

    state        16 B per parameter, sharded over the ranks.
    gathered     the largest FSDP unit (a decoder layer, or the embedding or head) gathered
                 in the compute dtype, the next one prefetched, and its unsharded gradient
                 (compute dtype, then fp32 to reduce).
    activations  each decoder layer's input (what checkpointing keeps), and beside them the
                 larger of what comes and goes: one layer's activations (recomputed in
                 backward, counted per token as the tensors a LLaMA layer saves: the two
                 RMSNorms' inputs and outputs and their fp32 statistics, q, k and v before
                 and after RoPE, the attention and projection outputs, the SwiGLU's gate, up,
                 SiLU and product; and, in its backward, the product's two gradients beside
                 them) or the loss (loss_bytes_per_logit per token and vocabulary entry).
                 Without checkpointing every layer's activations stay, and the loss comes on
                 top. tests/training/test_memory.py measures both on the CPU.

    Leaves out the CUDA context, NCCL's buffers and the allocator's fragmentation, which
    the fit check keeps a margin for."""
    h, kv = preset.hidden, preset.kv_heads * preset.head_dim
    total, _ = parameters(preset, vocab)
    tokens = batch * seq_len
    per_layer = (total - 2 * vocab * h - h) // preset.layers
    largest_unit = max(per_layer, vocab * h)
    layer_activations = tokens * ((9 * h + 3 * kv + (4 + 2) * preset.intermediate) * compute_bytes + 2 * 4 * h)
    loss = tokens * vocab * loss_bytes_per_logit(compute_bytes)
    if checkpointed:
        activations = preset.layers * tokens * h * compute_bytes + max(layer_activations, loss)
    else:
        activations = preset.layers * layer_activations + loss
    return {
        "state": STATE_BYTES_PER_PARAMETER * total / ranks,
        "gathered": largest_unit * (2 * compute_bytes + compute_bytes + 4),
        "activations": activations,
    }


# What one GPU must hold, projected from memory_per_gpu (an estimate of the tensors, by parts) to
# what runs on eight ranks and more (the config's admission and the node benchmark's plan read it):
# - RESERVED_PER_ESTIMATE: what the caching allocator holds at its peak per byte of the estimate.
#   torchtitan publishes 83.9 GiB (its "Memory(GiB)", the allocator's peak reserved) for the 8B
#   with FSDP over 8 H100 at sequence 32768, local batch 1, full activation checkpointing
#   (benchmarks/llama3_h100_202412_torchtitan.md, Table 2, "FSDP 8, CP 1"), where the estimate is
#   74.8 GiB: 1.121, rounded up. On one rank the GPU measurement held 1.04 of it
#   (tests/fixtures/gpu_memory_h200.json): eight ranks hold more (NCCL's and FSDP's communication
#   buffers, fragmentation), and the eight-rank figure is the one the job runs at.
# - Beside it, the CUDA context (about 400 MB with lazy module loading: pytorch/pytorch issue
#   109888) and, with more than one rank, NCCL's buffers for one group over NVLink (688 MB:
#   NVIDIA/nccl issue 964).
# - FIT_SHARE: the share of the memory PyTorch reports for the GPU (torch_memory_mib, not the
#   nominal: what the driver keeps is never the allocator's) the projection may fill; the rest is
#   the margin, for a long run's growth and the calibration's limits.
# The calibration's limits: RESERVED_PER_ESTIMATE is one published run's (torchtitan's 8B, FSDP 8,
# sequence 32,768, torch.compile and Float8 linears, on 8 H100 of 96 GB HBM2e), not measured
# here at 8 ranks, at the job's sequence 8,192 or in bf16 alone; this project's own measurements are
# on one rank (the H200 fixture, 1.04 of the estimate at most). A run at 8 ranks (make gpu-bench
# prints each rank's peak reserved) is what would confirm or correct it.
# tests/training/test_memory.py holds each to its source.
RESERVED_PER_ESTIMATE = 1.13
CUDA_CONTEXT_BYTES = 400e6
NCCL_GROUP_BYTES = 688e6
FIT_SHARE = 0.95

# The memory PyTorch reports for one GPU (torch.cuda.get_device_properties(i).total_memory), in MiB,
# by the catalogue's GPU name, where a source here states it: less than the nominal memory
# (DescribeInstanceTypes' SizeInMiB) by what the driver and the GPU keep, and all the allocator can
# ever hold. tests/training/test_memory.py holds each to its source.
TORCH_MEMORY_MIB = MappingProxyType({
    # NVIDIA's MIG user guide ("Getting Started with MIG", nvidia-smi on an A100-SXM4-40GB): 40537 of
    # the 40960 MiB; PyTorch reports the same on p4d (issue 54's review).
    "A100": 40537,
    # tests/fixtures/gpu_memory_h200.json: one H200 of a p5en, 139.8 GiB as torch reported it.
    "H200": 143155,
})
# Elsewhere (H100, A10G, L4, L40S, B200 ...) PyTorch's share is assumed: the nominal less this,
# about twice the largest shortfall recorded above (A100 40 GB: 1.03%; H200: 0.85%).
UNRECORDED_SHORTFALL = 0.02
# A MIG slice (its eighths of the nominal): NVIDIA's MIG user guide (`nvidia-smi mig -lgip` on an
# A100-SXM4-40GB) shows slices up to 5% under their share (1g.5gb: 4.75 GiB).
SLICE_SHORTFALL = 0.05


def torch_memory_mib(gpu: str | None, nominal_mib: int) -> tuple[int, bool]:
    """(the MiB PyTorch reports for one `gpu` of `nominal_mib`, whether a source states it; else
    it is assumed, UNRECORDED_SHORTFALL under the nominal). `gpu` None: a MIG slice of that share,
    assumed SLICE_SHORTFALL under it."""
    if gpu in TORCH_MEMORY_MIB:
        return TORCH_MEMORY_MIB[gpu], True
    return int(nominal_mib * (1 - (SLICE_SHORTFALL if gpu is None else UNRECORDED_SHORTFALL))), False


def projected_per_gpu(parts: dict[str, float], ranks: int) -> float:
    """Bytes one GPU must have for a job whose memory_per_gpu is `parts`, over `ranks` ranks."""
    return RESERVED_PER_ESTIMATE * sum(parts.values()) + CUDA_CONTEXT_BYTES + (NCCL_GROUP_BYTES if ranks > 1 else 0)
