"""The 8B on every GPU of the machine, as the job trains it: tokens/s, MFU and peak memory per rank.

    make gpu-bench            (a machine with CUDA GPUs and a CUDA build of torch with transformers)

torchrun over all the GPUs (--nproc-per-node = their count), train.py with the job's production
flags (manifests/job.py SPEED_FLAGS, full activation checkpointing, bf16, sequence 8192, batch 1
per GPU) on synthetic tokens (nothing to download) at the full 128,256-token vocabulary. The whole
model where the memory projection (training/model_shape.py projected_per_gpu, the rule the
config admits the job with) fits it within FIT_SHARE of one GPU's memory, sharded over all of
them; otherwise the most decoder layers that fit, and it says so. Prints the medians over the
steps after warm-up (torch.compile's first steps excluded) and each rank's allocator peaks.
MFU is torchtitan's formula (model_shape.mfu) for the model it ran (its layers), against the GPU's
own peak (model_shape.PEAK_TFLOPS: an H100 SXM, NVL and PCIe each its own).

Before the run it checks what the run would otherwise find only at its end: every GPU the same
model, and one whose peak the table has (else --peak-tflops). The torchrun has a time limit
(--timeout); past it the whole process group (torchrun and its workers) is stopped.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
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
# The torchrun's time limit: the 40 steps take about a minute on a p5 after torch.compile's first
# steps (minutes for 32 layers); half an hour is a hung collective or a stuck compile, not a slow run.
TIMEOUT_S = 1800
# After the limit: torchrun's own grace for its workers once it is sent SIGTERM (its agent waits
# 30 s before SIGKILL), then this process kills what is left of the group.
STOP_GRACE_S = 30


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


def train_command(chosen: Plan, steps: int, seq_len: int = model_shape.JOB_SEQ_LEN[MODEL], peak_tflops: float | None = None) -> list[str]:
    """torchrun over every GPU, train.py as the job runs the 8B (tests parse it with train.py's parser)."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={chosen.gpus}", str(TRAINING / "train.py"),
        f"--model={MODEL}", *([] if chosen.whole else [f"--layers={chosen.layers}"]), "--synthetic-data",
        f"--seq-len={seq_len}", f"--batch-size={model_shape.JOB_BATCH}", f"--max-steps={steps}", "--log-interval=5", "--bf16=on",
        *PRODUCTION_FLAGS, *([f"--peak-tflops={peak_tflops}"] if peak_tflops else []),
    ]


def preflight(names: list[str], peak_tflops: float | None) -> str | None:
    """Why the run cannot give its figures, in one line, before it starts (None: it can): GPUs of
    more than one model (one peak, one memory plan for all), or one whose dense bf16 peak the
    table lacks and --peak-tflops does not give (MFU would be missing after the whole run)."""
    if len(set(names)) > 1:
        return f"gpu-bench: the GPUs are not one model ({', '.join(sorted(set(names)))}); run it on a machine of one"
    if peak_tflops is None and model_shape.peak_tflops(names[0]) is None:
        return (f"gpu-bench: {names[0]} has no dense bf16 peak in training/model_shape.py PEAK_TFLOPS (listed: "
                f"{', '.join(model_shape.PEAK_TFLOPS)}), so MFU cannot be computed; add it from NVIDIA's data sheet, or pass --peak-tflops")
    return None


def run_torchrun(command: list[str], env: dict, timeout_s: float) -> tuple[int, str, str]:
    """The command in a process group of its own: (exit status, stdout, stderr). Past `timeout_s`
    the group is sent SIGTERM, then SIGKILL STOP_GRACE_S later, and the status is 124 (timeout(1)'s)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout_s)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        try:
            os.killpg(process.pid, signal.SIGKILL)  # workers torchrun left behind
        except ProcessLookupError:
            pass
        return 124, out, err + f"\ngpu-bench: torchrun did not finish in {timeout_s:.0f} s (--timeout); its process group was stopped\n"


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
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds the torchrun may take (default {TIMEOUT_S})")
    p.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 TFLOPS of one GPU, where the table lacks it")
    args = p.parse_args(argv)
    import torch

    gpus = torch.cuda.device_count()
    if not gpus:
        print("gpu-bench: no CUDA device", file=sys.stderr)
        return 1
    problem = preflight([torch.cuda.get_device_name(i) for i in range(gpus)], args.peak_tflops)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    chosen = plan(gpus, props.total_memory)
    if chosen is None:
        print(f"gpu-bench: not one layer of the 8B fits {props.total_memory / GIB:.1f} GiB per GPU over {gpus}", file=sys.stderr)
        return 1
    print(f"gpu-bench: {chosen.words} (the memory PyTorch reports: {props.total_memory // 2**20} MiB)", flush=True)
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # as the job sets it
    code, out, err = run_torchrun(train_command(chosen, args.steps, peak_tflops=args.peak_tflops), env, args.timeout)
    sys.stdout.write(out[-3000:])
    if code:
        sys.stderr.write(err[-6000:])
        return code
    print(summary(out, chosen, args.warmup, props.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
