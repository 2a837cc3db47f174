"""Training time lost per checkpoint, synchronous against background saves (train.py's
save_checkpoint, --async-checkpoint), on the CPU: one gloo process, a LLaMA of about 160M
parameters (2.5 GB of fp32 weights, gradients and AdamW state) after a real step.

    .venv/bin/python tests/bench/bench_checkpoint.py [--saves 3] [--dir /tmp/ckpt-bench]

Prints, per mode, the seconds training waits for each save (sync: the whole write; async:
the copy to host memory) and, for async, the seconds until the write is complete.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "training"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--dir", default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29577")
    import torch
    import torch.distributed as dist

    import train
    from model_shape import Preset, parameters

    dist.init_process_group("gloo", rank=0, world_size=1)
    preset = Preset(hidden=1024, layers=8, heads=16, kv_heads=4, intermediate=2816, max_positions=256, rope_theta=10000.0, vocab=32000)
    model = train.shard(train.build_model(train.model_config(preset, preset.vocab)), torch.device("cpu"), bf16=False,
                        activation_checkpointing="none", compile_layers=False, units="layers")
    train.materialise(model, torch.device("cpu"), 0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rows = torch.randint(preset.vocab, (1, 65))
    train.next_token_loss(model(input_ids=rows[:, :-1]).logits, rows[:, 1:]).backward()
    optimizer.step()
    stream = train.SyntheticTokens(preset.vocab, 64, 0)
    background = dist.new_group(backend="gloo")
    print(f"{parameters(preset, preset.vocab)[0] / 1e6:.0f}M parameters")
    with tempfile.TemporaryDirectory(dir=args.dir) as base:
        for mode in ("sync", "async"):
            waited, written = [], []
            for i in range(args.saves):
                step = (1 if mode == "sync" else 100) + i
                t0 = time.perf_counter()
                result = train.save_checkpoint(base, step, model, optimizer, stream, 0, 100,
                                               background=background if mode == "async" else None)
                waited.append(time.perf_counter() - t0)
                if mode == "async":
                    result.result()
                    train.complete_checkpoint(base, step, 0, 100)
                    written.append(time.perf_counter() - t0)
            line = f"{mode}: training waits {statistics.median(waited):.2f} s per save (median of {args.saves})"
            if written:
                line += f"; written in {statistics.median(written):.2f} s"
            print(line)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
