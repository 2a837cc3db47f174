"""LLaMA pretraining with PyTorch FSDP on a streamed dataset (C4 by default).

Runs under `hyperpodrun` (the HyperPod elastic agent) and plain `torchrun` alike: both set
RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous variables this script reads.

What the HyperPod training operator's log rules watch (log_format.py holds the formats
and the rules' regexes, so the two cannot drift apart):
  step=<n> loss=<float> lr=<float> tokens_per_s=<float> [mfu=<float>]   one line per step
  checkpoint saved step=<n> path=<dir> seconds=<float>                   one line per save

Checkpoints are sharded (torch.distributed.checkpoint), one directory per save. A save is
complete only when rank 0 has written its manifest listing every file and its size, after
all ranks finished; resume takes the newest complete one, so a partial or truncated
checkpoint is never picked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from log_format import CHECKPOINT_LINE, LOSS_LINE  # beside this script, in the image too

MANIFEST = "_COMPLETE.json"

# Peak dense bf16 TFLOPS per device, for MFU (vendor data sheets).
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "A10G": 70.0, "L4": 121.0, "L40S": 362.0, "B200": 2250.0}


@dataclass(frozen=True)
class Preset:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int
    rope_theta: float
    vocab: int | None  # None: the tokenizer's


PRESETS = {
    # LLaMA 3.1 8B: the real shape.
    "llama3.1-8b": Preset(4096, 32, 32, 8, 14336, 8192, 500000.0, 128256),
    # Small enough to train on a laptop CPU in seconds, same architecture.
    "tiny": Preset(64, 2, 4, 2, 128, 256, 10000.0, None),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(PRESETS), default="llama3.1-8b")
    p.add_argument("--tokenizer", default="hf-internal-testing/llama-tokenizer", help="name or local path")
    p.add_argument("--dataset", default="allenai/c4")
    p.add_argument("--dataset-config", default="en")
    p.add_argument("--dataset-split", default="train")
    p.add_argument("--data-files", nargs="*", help="local text files: loaded with the 'text' builder, streamed the same way")
    p.add_argument("--text-field", default="text")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=1, help="sequences per device per step")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--checkpoint-dir", default=None, help="local path or s3://bucket/prefix")
    p.add_argument("--checkpoint-interval", type=int, default=50)
    p.add_argument("--log-interval", type=int, default=10, help="steps between host syncs; every step is still logged")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--shuffle-buffer", type=int, default=10000)
    p.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--bf16", choices=["auto", "on", "off"], default="auto", help="auto: on with CUDA bf16")
    p.add_argument("--peak-tflops", type=float, default=None, help="per device, for MFU (default: from the GPU name)")
    return p.parse_args(argv)


# ---------------------------------------------------------------- distributed


def setup_distributed():
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if "MASTER_ADDR" not in os.environ:  # a single process without torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29511"))
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(minutes=30))
    return rank, world, local_rank, device


def log(line: str, *, local_rank: int):
    # One writer per node: each pod's log carries the lines the operator watches.
    if local_rank == 0:
        print(line, flush=True)


# ---------------------------------------------------------------- data


def load_stream(args, rank: int, world: int):
    from datasets import load_dataset
    from datasets.distributed import split_dataset_by_node

    if args.data_files:
        ds = load_dataset("text", data_files={"train": list(args.data_files)}, split="train", streaming=True)
    else:
        ds = load_dataset(args.dataset, args.dataset_config, split=args.dataset_split, streaming=True)
    ds = split_dataset_by_node(ds, rank=rank, world_size=world)
    # Each rank its own shuffle seed, so ranks never see the same order.
    return ds.shuffle(seed=args.seed + rank, buffer_size=args.shuffle_buffer)


def token_chunks(stream, tokenizer, seq_len: int, text_field: str):
    """Pack documents (EOS-separated) into seq_len+1 token chunks, forever."""
    buffer: list[int] = []
    eos = tokenizer.eos_token_id
    epoch = 0
    while True:
        stream.set_epoch(epoch)
        for example in stream:
            buffer.extend(tokenizer(example[text_field], add_special_tokens=False)["input_ids"])
            if eos is not None:
                buffer.append(eos)
            while len(buffer) >= seq_len + 1:
                yield buffer[: seq_len + 1]
                buffer = buffer[seq_len + 1 :]
        epoch += 1


def batches(chunks, batch_size: int, device, skip: int = 0):
    for _ in range(skip):  # resume: this rank's data position, in chunks
        next(chunks)
    while True:
        rows = torch.tensor([next(chunks) for _ in range(batch_size)], dtype=torch.long)
        yield rows[:, :-1].to(device, non_blocking=True), rows[:, 1:].to(device, non_blocking=True)


# ---------------------------------------------------------------- model


def build_model(preset: Preset, vocab_size: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=preset.vocab or vocab_size,
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        max_position_embeddings=preset.max_positions,
        rope_theta=preset.rope_theta,
        tie_word_embeddings=False,
        use_cache=False,
    )
    torch.manual_seed(seed)  # identical initial weights on every rank before sharding
    return LlamaForCausalLM(config)


def shard(model, device, bf16: bool, activation_checkpointing: bool):
    """FSDP2: each decoder layer its own unit, then the root (embeddings, norm, head)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    if activation_checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
        )

        apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, LlamaDecoderLayer),
        )
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    model.to(device)
    for module in model.modules():
        if isinstance(module, LlamaDecoderLayer):
            fully_shard(module, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def lr_schedule(args):
    def factor(step: int) -> float:
        if step < args.warmup_steps:
            return (step + 1) / max(1, args.warmup_steps)
        progress = min(1.0, (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps))
        return args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def flops_per_token(model, preset: Preset, seq_len: int) -> float:
    params = sum(p.numel() for p in model.parameters())
    return 6 * params + 12 * preset.layers * preset.hidden * seq_len


def peak_flops(args, device) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for gpu, tflops in PEAK_TFLOPS.items():
        if gpu in name:
            return tflops * 1e12
    return None


# ---------------------------------------------------------------- checkpoints


def _fs(path: str):
    import fsspec

    return fsspec.core.url_to_fs(path)[0]


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def complete_checkpoints(base: str) -> list[tuple[int, str]]:
    """(step, dir) of every complete checkpoint under `base`, newest first."""
    fs = _fs(base)
    if not fs.exists(base):
        return []
    found = []
    for entry in fs.ls(base, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        match = re.fullmatch(r"step_(\d+)", name)
        if not match:
            continue
        ckpt = _join(base, name)
        if _is_complete(fs, ckpt):
            found.append((int(match.group(1)), ckpt))
    return sorted(found, reverse=True)


def _is_complete(fs, ckpt: str) -> bool:
    manifest = _join(ckpt, MANIFEST)
    if not fs.exists(manifest):
        return False
    try:
        listed = json.loads(fs.cat_file(manifest))["files"]
    except (ValueError, KeyError):
        return False
    for name, size in listed.items():
        path = _join(ckpt, name)
        if not fs.exists(path) or fs.size(path) != size:
            return False
    return True


def _writer_reader(path: str):
    if "://" in path:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

        return FsspecWriter(path), FsspecReader(path)
    import torch.distributed.checkpoint as dcp

    return dcp.FileSystemWriter(path), dcp.FileSystemReader(path)


def save_checkpoint(base: str, step: int, model, optimizer, rank: int) -> str:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    ckpt = _join(base, f"step_{step:08d}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    writer, _ = _writer_reader(ckpt)
    dcp.save({"model": model_sd, "optim": optim_sd}, storage_writer=writer)
    dist.barrier()  # every rank's shards are written before the manifest says so
    if rank == 0:
        fs = _fs(ckpt)
        files = {
            e["name"].rstrip("/").rsplit("/", 1)[-1]: e["size"]
            for e in fs.ls(ckpt, detail=True)
            if e["type"] == "file" and not e["name"].endswith(MANIFEST)
        }
        tmp = _join(ckpt, MANIFEST + ".tmp")
        fs.pipe_file(tmp, json.dumps({"step": step, "files": files}).encode())
        fs.mv(tmp, _join(ckpt, MANIFEST))
    dist.barrier()
    return ckpt


def load_checkpoint(ckpt: str, model, optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    _, reader = _writer_reader(ckpt)
    dcp.load(state, storage_reader=reader)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


# ---------------------------------------------------------------- training


def train(args) -> int:
    from transformers import AutoTokenizer

    rank, world, local_rank, device = setup_distributed()
    preset = PRESETS[args.model]
    use_bf16 = args.bf16 == "on" or (args.bf16 == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, token=os.environ.get("HF_TOKEN"))
    model = build_model(preset, len(tokenizer), args.seed)
    flops_token = flops_per_token(model, preset, args.seq_len)
    model = shard(model, device, use_bf16, args.activation_checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(args))

    start = 0
    if args.checkpoint_dir:
        found = complete_checkpoints(args.checkpoint_dir)
        if found:
            start, ckpt = found[0]
            load_checkpoint(ckpt, model, optimizer)
            for _ in range(start):
                scheduler.step()
            log(f"resumed from {ckpt} at step={start}", local_rank=local_rank)
    data = batches(
        token_chunks(load_stream(args, rank, world), tokenizer, args.seq_len, args.text_field),
        args.batch_size,
        device,
        skip=start * args.batch_size,
    )
    peak = peak_flops(args, device)
    tokens_per_step = args.batch_size * args.seq_len * world
    log(
        f"training model={args.model} params={sum(p.numel() for p in model.parameters()) * world / 1e6:.1f}M "
        f"world={world} device={device.type} bf16={use_bf16} start_step={start} max_steps={args.max_steps}",
        local_rank=local_rank,
    )

    model.train()
    pending: list[tuple[int, torch.Tensor, float]] = []
    window_start = time.perf_counter()
    for step in range(start + 1, args.max_steps + 1):
        inputs, labels = next(data)
        loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        pending.append((step, loss.detach(), scheduler.get_last_lr()[0]))
        scheduler.step()
        save_now = args.checkpoint_dir and (step % args.checkpoint_interval == 0 or step == args.max_steps)
        if len(pending) >= args.log_interval or save_now or step == args.max_steps:
            # The only host sync in the loop: one all-reduce of this window's losses.
            losses = torch.stack([l for _, l, _ in pending]).float()
            dist.all_reduce(losses)  # SUM: gloo has no AVG
            losses /= world
            elapsed = time.perf_counter() - window_start
            tps = tokens_per_step * len(pending) / elapsed
            for (s, _, lr), value in zip(pending, losses.tolist()):
                line = LOSS_LINE.format(step=s, loss=value, lr=lr, tps=tps)
                if peak:
                    line += f" mfu={tps * flops_token / (peak * world):.3f}"
                log(line, local_rank=local_rank)
            pending.clear()
            window_start = time.perf_counter()
        if save_now:
            t0 = time.perf_counter()
            path = save_checkpoint(args.checkpoint_dir, step, model, optimizer, rank)
            log(CHECKPOINT_LINE.format(step=step, path=path, seconds=time.perf_counter() - t0), local_rank=local_rank)
            window_start = time.perf_counter()
    log(f"training finished step={args.max_steps}", local_rank=local_rank)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args()))
