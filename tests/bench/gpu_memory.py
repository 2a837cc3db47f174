"""The memory estimate the config decides fits with (training/model_shape.py memory_per_gpu),
against torch.cuda.max_memory_allocated on one GPU: the 8B shape (its full 128,256-token
vocabulary, 8192-token sequences, batch 1) with a few decoder layers, as the job trains it
(train.py's own functions: meta-device build, FSDP2 with the embedding and head as their own
units, bf16 compute, full activation checkpointing, fused AdamW).

    python tests/bench/gpu_memory.py                 (one CUDA GPU; torch 2.11, transformers 4.53.3)

Nothing is downloaded: synthetic tokens, the model from an in-code config. Each layer count
runs in a process of its own (a fresh allocator); each prints one JSON line, then a summary:
the measured peak, the estimate by parts, their ratio, and what the allocator reserved beyond
its peak (fragmentation, which the fit check's margin must cover). One rank, so the state is
not sharded; the estimate's per-layer and per-vocabulary terms are what this checks, and the
ratio is one rank's; the job's sharded shape on eight ranks is projected with torchtitan's published
eight-GPU figure instead (training/model_shape.py RESERVED_PER_ESTIMATE). A run on one H200 is recorded in
tests/fixtures/gpu_memory_h200.json, which tests/training/test_memory.py holds the estimate to.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TRAINING = Path(__file__).resolve().parents[2] / "training"
GIB = 2**30


def measure(model_name: str, layers: int, steps: int, seq_len: int, device_name: str) -> dict:
    """One process: build, shard, train `steps` steps of random tokens; peaks and estimate."""
    sys.path.insert(0, str(TRAINING))
    import torch

    import model_shape
    import train

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29611")
    _, world, _, device = train.setup_distributed()
    if device_name == "cpu":
        device = torch.device("cpu")
    preset = model_shape.Preset(**{**model_shape.PRESETS[model_name].__dict__, "layers": layers})
    vocab = preset.vocab
    cuda = device.type == "cuda"
    model = train.shard(train.build_model(train.model_config(preset, vocab)), device, bf16=cuda,
                        activation_checkpointing="full", compile_layers=False, units="tuned")
    train.materialise(model, device, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, **({"fused": True} if cuda else {}))
    generator = torch.Generator().manual_seed(0)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    peaks, started = [], time.perf_counter()
    for _ in range(steps):
        rows = torch.randint(vocab, (model_shape.JOB_BATCH, seq_len + 1), generator=generator).to(device)
        loss = train.next_token_loss(train.logits_of(model, rows[:, :-1]), rows[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated(device))
    estimate = model_shape.memory_per_gpu(preset, vocab, seq_len=seq_len, batch=model_shape.JOB_BATCH, ranks=world)
    result = {
        "model": model_name, "layers": layers, "ranks": world, "seq_len": seq_len, "steps": steps,
        "seconds": round(time.perf_counter() - started, 1),
        "estimate_gib": {k: round(v / GIB, 3) for k, v in estimate.items()},
        "estimate_total_gib": round(sum(estimate.values()) / GIB, 3),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
    }
    if cuda:
        props = torch.cuda.get_device_properties(device)
        result.update({
            "gpu": props.name,
            "gpu_total_gib": round(props.total_memory / GIB, 2),
            "peak_allocated_gib": round(max(peaks) / GIB, 3),
            "peak_by_step_gib": [round(p / GIB, 3) for p in peaks],
            "allocated_after_step_gib": round(torch.cuda.memory_allocated(device) / GIB, 3),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / GIB, 3),
            "measured_over_estimate": round(max(peaks) / sum(estimate.values()), 3),
        })
    train.dist.destroy_process_group()
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.1-8b")
    p.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the code path only, no measurement")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # the child process: one layer count
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.model, args.layers[0], args.steps, args.seq_len, args.device)), flush=True)
        return 0
    rows = []
    for layers in args.layers:
        cmd = [sys.executable, __file__, "--one", f"--model={args.model}", "--layers", str(layers), f"--steps={args.steps}",
               f"--seq-len={args.seq_len}", f"--device={args.device}"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            sys.stderr.write(out.stderr[-6000:])
            return out.returncode
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    for row in rows:
        if "peak_allocated_gib" in row:
            print(f"gpu-memory: {row['layers']} layers of {row['model']}, seq {row['seq_len']}, 1 {row['gpu']}: "
                  f"peak {row['peak_allocated_gib']:.2f} GiB allocated ({row['peak_reserved_gib']:.2f} reserved), "
                  f"estimate {row['estimate_total_gib']:.2f} GiB ({row['estimate_gib']}), measured/estimate {row['measured_over_estimate']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
