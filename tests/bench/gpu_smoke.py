"""The 8B shape with fewer layers on one GPU: tokens/s and MFU of train.py's fast path.

    make gpu-smoke            (on a machine with one CUDA GPU and a CUDA build of torch)

Synthetic tokens (nothing to download), the full 128,256-token vocabulary and 8192-token
sequences, bf16, torch.compile per layer, selective activation checkpointing, fused AdamW,
tuned FSDP units. Prints the medians over the steps after warm-up (compile included in
the first steps). MFU counts the reduced model's FLOPs against the GPU's dense bf16 peak.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "training" / "train.py"


def train_command(layers: int, steps: int) -> list[str]:
    """train.py on the 8B shape's fast path (the CPU tests parse it with train.py's own parser)."""
    return [
        sys.executable, str(TRAIN), "--model=llama3.1-8b", f"--layers={layers}", "--synthetic-data",
        "--seq-len=8192", "--batch-size=1", f"--max-steps={steps}", "--log-interval=5", "--bf16=on",
        "--compile", "--fused-optimizer", "--fsdp-units=tuned", "--activation-checkpointing=selective",
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=15)
    args = p.parse_args(argv)
    cmd = train_command(args.layers, args.steps)
    env = {**os.environ, "MASTER_PORT": os.environ.get("MASTER_PORT", "29599")}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stdout.write(out.stdout[-3000:])
    if out.returncode:
        sys.stderr.write(out.stderr[-6000:])
        return out.returncode
    rows = [(int(s), float(t), float(m)) for s, t, m in
            re.findall(r"^step=(\d+) .*tokens_per_s=(\S+) mfu=(\S+)", out.stdout, flags=re.M)]
    after = [(t, m) for s, t, m in rows if s > args.warmup]
    if not after:
        print("no steps after warm-up reported tokens/s and MFU (no CUDA device?)", file=sys.stderr)
        return 1
    print(f"gpu-smoke: {args.layers} layers of LLaMA 3.1 8B, seq 8192, 1 GPU: "
          f"median {statistics.median(t for t, _ in after):.0f} tokens/s, MFU {statistics.median(m for _, m in after):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
