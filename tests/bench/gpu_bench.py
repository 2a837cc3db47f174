"""The 8B on every GPU of the machine, as the job trains it: tokens/s, MFU and peak memory per rank.

    make gpu-bench            (a machine with CUDA GPUs and a CUDA build of torch with transformers)

torchrun over all the GPUs (--nproc-per-node = their count), train.py with the job's production
flags (manifests/job.py SPEED_FLAGS, full activation checkpointing, bf16, sequence 8192, batch 1
per GPU) on synthetic tokens (nothing to download) at the full 128,256-token vocabulary. The whole
model where the memory projection (training/model_shape.py projected_per_gpu, the rule the
config admits the job with) fits it within FIT_SHARE of one GPU's memory, sharded over all of
them; otherwise the most decoder layers that fit, and it says so. Prints the medians over the
steps after warm-up (torch.compile's first steps excluded) and each rank's allocator peaks.
MFU is torchtitan's formula (model_shape.mfu) for the model it ran (its layers).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TRAINING = Path(__file__).resolve().parents[2] / "training"
sys.path.insert(0, str(TRAINING))
import model_shape  # noqa: E402

MODEL = "llama3.1-8b"
# What manifests/job.py passes (SPEED_FLAGS; tests/training/test_gpu_bench.py holds the two equal).
PRODUCTION_FLAGS = ("--compile", "--fused-optimizer", "--fsdp-units=tuned")
GIB = 2**30


@dataclass(frozen=True)
class Plan:
    gpus: int
    layers: int  # of the preset's
    whole: bool
    projected: float  # bytes per GPU, model_shape.projected_per_gpu
    memory: float  # bytes per GPU

    @property
    def words(self) -> str:
        shape = model_shape.PRESETS[MODEL]
        what = (f"the whole 8B ({shape.layers} layers)" if self.whole
                else f"{self.layers} of the 8B's {shape.layers} layers (the most that fit: the whole model does not)")
        return (f"{what} over {self.gpus} GPU{'s' * (self.gpus > 1)}: projected {self.projected / GIB:.1f} of "
                f"{self.memory / GIB:.1f} GiB per GPU")


def plan(gpus: int, memory_bytes: float, seq_len: int = model_shape.JOB_SEQ_LEN[MODEL]) -> Plan | None:
    """The most decoder layers of the 8B (all of them where they fit) whose projection fits
    FIT_SHARE of one GPU's `memory_bytes`, sharded over `gpus`; None where not even one does."""
    shape = model_shape.PRESETS[MODEL]
    for layers in range(shape.layers, 0, -1):
        preset = model_shape.Preset(**{**shape.__dict__, "layers": layers})
        parts = model_shape.memory_per_gpu(preset, preset.vocab, seq_len=seq_len, batch=model_shape.JOB_BATCH, ranks=gpus)
        projected = model_shape.projected_per_gpu(parts, gpus)
        if projected <= model_shape.FIT_SHARE * memory_bytes:
            return Plan(gpus, layers, layers == shape.layers, projected, memory_bytes)
    return None


def train_command(chosen: Plan, steps: int, seq_len: int = model_shape.JOB_SEQ_LEN[MODEL]) -> list[str]:
    """torchrun over every GPU, train.py as the job runs the 8B (tests parse it with train.py's parser)."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={chosen.gpus}", str(TRAINING / "train.py"),
        f"--model={MODEL}", *([] if chosen.whole else [f"--layers={chosen.layers}"]), "--synthetic-data",
        f"--seq-len={seq_len}", f"--batch-size={model_shape.JOB_BATCH}", f"--max-steps={steps}", "--log-interval=5", "--bf16=on",
        *PRODUCTION_FLAGS,
    ]


def summary(out: str, chosen: Plan, warmup: int, device: str) -> str:
    """What a run printed, in one line: medians after warm-up, and each rank's peaks."""
    rows = [(int(s), float(t), float(m)) for s, t, m in re.findall(r"^step=(\d+) .*tokens_per_s=(\S+) mfu=(\S+)", out, flags=re.M)]
    after = [(t, m) for s, t, m in rows if s > warmup]
    if not after:
        raise SystemExit("gpu-bench: no steps after warm-up reported tokens/s and MFU (no CUDA device?)")
    memory = sorted((int(r), float(a), float(v)) for r, a, v in
                    re.findall(r"^memory rank=(\d+) peak_allocated_gib=(\S+) peak_reserved_gib=(\S+)", out, flags=re.M))
    tps = statistics.median(t for t, _ in after)
    per_rank = "; ".join(f"rank {r} {a:.1f} allocated, {v:.1f} reserved" for r, a, v in memory)
    return (f"gpu-bench: {chosen.words}; {chosen.gpus} x {device}: median {tps:.0f} tokens/s ({tps / chosen.gpus:.0f} per GPU), "
            f"MFU {statistics.median(m for _, m in after):.3f}; peak GiB per rank: {per_rank}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=15)
    args = p.parse_args(argv)
    import torch

    gpus = torch.cuda.device_count()
    if not gpus:
        print("gpu-bench: no CUDA device", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    chosen = plan(gpus, props.total_memory)
    if chosen is None:
        print(f"gpu-bench: not one layer of the 8B fits {props.total_memory / GIB:.1f} GiB per GPU over {gpus}", file=sys.stderr)
        return 1
    print(f"gpu-bench: {chosen.words}", flush=True)
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # as the job sets it
    out = subprocess.run(train_command(chosen, args.steps), env=env, capture_output=True, text=True)
    sys.stdout.write(out.stdout[-3000:])
    if out.returncode:
        sys.stderr.write(out.stderr[-6000:])
        return out.returncode
    print(summary(out.stdout, chosen, args.warmup, props.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
