"""LLaMA pretraining with PyTorch FSDP on a streamed dataset (C4 by default).

Runs under `hyperpodrun` (the HyperPod elastic agent) and plain `torchrun` alike: both set
RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous variables this script reads.

What the HyperPod training operator's log rules watch (log_format.py holds the formats
and the rules' regexes, so the two cannot drift apart):
  step=<n> loss=<float> lr=<float> tokens_per_s=<float> [mfu=<float>]   one line per step
  checkpoint saved step=<n> path=<dir> seconds=<float>                   one line per save
A step whose loss or gradient norm is not finite is skipped (no optimizer step) and prints
no loss line, so the rules' loss clocks keep running; a few in a row stop the job, and the
operator's restart passes over those steps' batches instead of training on them again (the
window is recorded beside the checkpoints; past --max-nonfinite-restarts windows a start ends
at once with one line).

SIGUSR1 (the agent's graceful stop) and SIGTERM save at the next step boundary and exit;
where that cannot happen in the agent's stop timeout, the job exits without a save.

Checkpoints are sharded (torch.distributed.checkpoint), one directory per save, with each
rank's data position (its shuffle buffer too), so a resume continues exactly, on the same
world size or, re-divided, on another. A save is complete only when rank 0 has written its
manifest listing every file and its size, after all ranks finished; resume takes the newest
complete one, so a partial or truncated checkpoint is never picked. --async-checkpoint
writes in the background and completes the save at a later step boundary. Resumed on another
world size (an elastic job), the global batch changes with it and so does the learning rate
(the linear scaling rule, against the world the first run started on); steps and warm-up stay.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import signal
import sys
import threading
import time
from datetime import timedelta
from itertools import islice

import numpy as np
import torch
import torch.distributed as dist

from log_format import (  # beside this script, in the image too
    CHECKPOINT_LINE,
    HF_TOKEN_SECRET_ENV,
    LOSS_LINE,
    LR_SCALED_LINE,
    NO_SAVE_STOP_LINE,
    NONFINITE_GIVE_UP_LINE,
    NONFINITE_STOP_LINE,
    PASS_OVER_NEXT_LINE,
    PASSED_OVER_LINE,
    SIGNAL_STOP_LINE,
    SKIPPED_LINE,
    UNSAFE_STATE_LINE,
)
from model_shape import PRESETS, Preset, mfu, parameters, peak_tflops

MANIFEST = "_COMPLETE.json"
DATA_STATE = "data_rank{rank:05d}.json"
# Beside the checkpoints: the windows of steps runs stopped on with non-finite values.
NONFINITE_RECORD = "_NONFINITE.json"
# What the stop watchdog keeps of the agent's stop timeout to write its line and exit.
STOP_MARGIN_S = 5


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(PRESETS), default="llama3.1-8b")
    p.add_argument("--layers", type=int, default=None, help="override the preset's layer count (smoke tests)")
    p.add_argument("--tokenizer", default="meta-llama/Llama-3.1-8B", help="name or local path")
    p.add_argument("--dataset", default="allenai/c4")
    p.add_argument("--dataset-config", default="en")
    p.add_argument("--dataset-split", default="train")
    p.add_argument("--data-files", nargs="*", help="local text files: loaded with the 'text' builder, streamed the same way")
    p.add_argument("--synthetic-data", action="store_true", help="random tokens, no tokenizer or dataset (benchmarks)")
    p.add_argument("--text-field", default="text")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=1, help="sequences per device per step")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument(
        "--max-nonfinite-steps",
        type=int,
        default=3,
        help="steps in a row with a non-finite loss or gradient norm (each skipped) after which training stops",
    )
    p.add_argument(
        "--max-nonfinite-restarts",
        type=int,
        default=3,
        help="windows of non-finite steps a restart passes over (each recorded beside the checkpoints); past them a "
        "start ends at once, saying so, until the record is deleted",
    )
    p.add_argument("--checkpoint-dir", default=None, help="local path or s3://bucket/prefix")
    p.add_argument("--checkpoint-interval", type=int, default=50)
    p.add_argument("--keep-checkpoints", type=int, default=3, help="complete checkpoints kept; older ones are deleted")
    p.add_argument(
        "--async-checkpoint",
        action="store_true",
        help="write checkpoints in the background (torch.distributed.checkpoint.async_save): training waits only while "
        "the state is copied to host memory; the save completes (manifest, 'checkpoint saved' line) at the first step "
        "boundary after every rank's files are written. The last save and a stop's save stay synchronous",
    )
    p.add_argument("--log-interval", type=int, default=10, help="steps per tokens/s window, printed together at its end")
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=300,
        help="seconds between the agent's stop signal and its SIGKILL (hyperpodrun --shutdown-timeout, the job's 300): "
        "a stop that has not saved by then (a peer gone, a hung collective) exits without a checkpoint",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--shuffle-buffer", type=int, default=10000, help="0: stream in order")
    p.add_argument(
        "--activation-checkpointing",
        choices=["full", "selective", "none"],
        default="full",
        help="selective: every second decoder layer (torchtitan's layer-level selective AC)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    p.add_argument("--fused-optimizer", action="store_true", help="fused AdamW")
    p.add_argument(
        "--fsdp-units",
        choices=["layers", "tuned"],
        default="layers",
        help="tuned: embedding and output head as their own units, last layer kept unsharded after forward",
    )
    p.add_argument("--bf16", choices=["auto", "on", "off"], default="auto", help="auto: on with CUDA bf16")
    p.add_argument("--peak-tflops", type=float, default=None, help="per device, for MFU (default: from the GPU name)")
    args = p.parse_args(argv)
    if args.max_nonfinite_steps < 1:
        p.error(f"--max-nonfinite-steps must be 1 or more, not {args.max_nonfinite_steps}")
    return args


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


class StopRequest:
    """SIGUSR1 and SIGTERM: save at the next step boundary, then exit 128 + the signal.

    The HyperPod agent (hyperpod-elastic-agent 1.1.3) stops workers with SIGUSR1 when the
    operator's /stop asks for a graceful stop (PLRHyperPodElasticAgent._stop_workers), else
    with its --shutdown-signal (the job passes SIGTERM), and sends SIGKILL --shutdown-timeout
    seconds later (or the /stop request's own timeout). A preemption sends SIGTERM too.

    Python runs a signal's handler only between bytecodes of the main thread, which may be
    waiting inside a collective for a peer that is gone. So a thread watches the signals'
    wakeup fd (written at once, whatever the main thread is doing) and, if the stop has not
    printed its last line `timeout_s` after the signal, prints why and exits itself before
    the agent's SIGKILL.
    """

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self, timeout_s: float, log_line):
        self.signum: int | None = None
        self.saved = 0  # the last checkpoint's step, for the watchdog's line
        self.reported = False  # the stop's last line is out: the watchdog only ends the process
        self._log = log_line
        self._closed = threading.Event()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._handlers = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        self._wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._watchdog = threading.Thread(target=self._watch, args=(max(1.0, timeout_s - STOP_MARGIN_S),), daemon=True)
        self._watchdog.start()

    def _handle(self, signum, frame):
        self.signum = self.signum or signum

    def _watch(self, timeout_s: float):
        signum = None
        while signum is None:
            try:
                data = os.read(self._read, 64)
            except OSError:
                return
            if not data:  # closed: training is over
                return
            # Python writes the number of every signal it handles (SIGINT too); ours only.
            signum = next((b for b in data if b in self.SIGNALS), None)
        if self._closed.wait(timeout_s):
            return
        if not self.reported:
            self._log(NO_SAVE_STOP_LINE.format(
                signal=signal.Signals(signum).name,
                why=f"no step boundary within {timeout_s:.0f}s of the signal (a peer gone, or a collective hung)",
                saved=self.saved,
            ))
        os._exit(128 + signum)

    def close(self):
        """Restore the handlers and end the watchdog (a run inside a test's process)."""
        signal.set_wakeup_fd(self._wakeup)
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._closed.set()
        os.close(self._write)
        self._watchdog.join()
        os.close(self._read)


# ---------------------------------------------------------------- data


def load_hf_token(environ=os.environ, client=None) -> str | None:
    """A gated tokenizer's Hugging Face token: HF_TOKEN when set, else the value of the Secrets
    Manager secret HF_TOKEN_SECRET_ID names, read with the job's Pod Identity role and put in
    HF_TOKEN for huggingface_hub. The token is in neither the pod spec nor config. Returns the
    secret's name when it read one. A JSON secret may hold it under "token" or "HF_TOKEN"."""
    secret = environ.get(HF_TOKEN_SECRET_ENV)
    if not secret or environ.get("HF_TOKEN"):
        return None
    if client is None:
        import botocore.session  # in the image through s3fs (aiobotocore)

        client = botocore.session.get_session().create_client("secretsmanager", region_name=environ.get("AWS_REGION"))
    value = client.get_secret_value(SecretId=secret)["SecretString"].strip()
    if value.startswith("{"):
        fields = json.loads(value)
        value = fields.get("token") or fields.get("HF_TOKEN") or ""
    if not value:
        raise SystemExit(f"Secrets Manager secret {secret} holds no Hugging Face token (a string, or JSON with \"token\")")
    environ["HF_TOKEN"] = value
    return secret


def load_stream(args, rank: int, world: int):
    from datasets import load_dataset

    if args.data_files:
        ds = load_dataset("text", data_files={"train": list(args.data_files)}, split="train", streaming=True)
    else:
        ds = load_dataset(args.dataset, args.dataset_config, split=args.dataset_split, streaming=True)
    # Only the text travels: the shuffle buffer is saved with each checkpoint, and C4's url
    # and timestamp would be most of it.
    ds = ds.select_columns([args.text_field])
    return RankDocuments(ds, rank, world, seed=args.seed, buffer_size=args.shuffle_buffer)


class DataStateError(ValueError):
    """A checkpoint's data position that this run cannot continue from (one line)."""


def deal(segments: list[tuple[int, int, int, int]], rank: int, world: int) -> list[tuple[int, int, int, int]]:
    """This rank's part of `segments`, the same list on every rank. A segment (shard, start,
    every, offset) is the examples of `shard` whose index is at least `start` and is `offset`
    modulo `every`. Whole segments go round the ranks while each rank can have one; the ones
    left over (len mod world) are split by example within gcd(left, world) groups of
    world/gcd ranks, each group taking left/gcd of them, so a rank reads a few extra shards
    instead of all of them. Every document: one rank, once."""
    whole = len(segments) - len(segments) % world
    mine = list(segments[rank:whole:world])
    left = segments[whole:]
    if left:
        groups = math.gcd(len(left), world)
        k, m = world // groups, rank // groups
        mine += [(shard, start, every * k, offset + every * m) for shard, start, every, offset in left[rank % groups :: groups]]
    return mine


def shard_plan(shards: int, rank: int, world: int, order: list[int]) -> list[tuple[int, int, int, int]]:
    """This rank's part of one pass over `shards` shards taken in `order` (the same on every
    rank), as segments in reading order (see deal)."""
    return deal([(shard, 0, 1, 0) for shard in order], rank, world)


def shard_order(shards: int, seed: int, epoch: int, shuffled: bool) -> list[int]:
    """One permutation per epoch from (seed, epoch), the same on every rank; file order unshuffled."""
    if not shuffled:
        return list(range(shards))
    return np.random.default_rng([seed, epoch, 0]).permutation(shards).tolist()


def _segments(saved) -> list[tuple[int, int, int, int]]:
    return [tuple(s) for s in saved]


def _unread(state: dict, epoch: int) -> tuple[list, list]:
    """What one rank of a saved state had still to give of `epoch`: the segments it had not
    read from the dataset, and the documents read but still in its shuffle buffer."""
    if epoch < state["epoch"]:
        return [], []
    if epoch > state["epoch"]:
        carried = state["carry"].get(str(epoch))
        if carried:
            return _segments(carried["segments"]), list(carried["buffer"])
        order = shard_order(state["shards"], state["seed"], epoch, state["shuffled"])
        return shard_plan(state["shards"], state["rank"], state["world"], order), []
    plan, place = _segments(state["plan"]), state["place"]
    rest = []
    if place < len(plan):
        shard, start, every, offset = plan[place]
        rest = [(shard, max(start, state["read"]), every, offset), *plan[place + 1 :]]
    return rest, list(state["buffer"])


class RankDocuments:
    """One rank's documents of a streamed dataset: each document is read by exactly one rank
    in each pass, whatever the world size, with the shuffle on, and a resume continues the
    very same sequence.

    datasets' split_dataset_by_node after a shuffle seeded per rank does not give that: the
    shuffle's seed also orders the shards before they are assigned, so ranks pick from
    different permutations; and where the world does not divide the shard count, every rank
    streams everything and keeps one example in `world` of its own shuffled stream. Here the
    shard order is one permutation per epoch from (seed, epoch), the same on every rank, cut
    by shard_plan; only the shuffle buffer over this rank's own documents (datasets'
    algorithm: fill, then swap a random one out for each new one; at the end of the pass,
    shuffle what is left and give it out) has a seed of the rank's.

    It offers what TokenStream uses of a datasets IterableDataset: set_epoch, one pass per
    iteration, state_dict and load_state_dict. datasets' own state drops the shuffle
    buffer, so a resume refills it with other documents and the run diverges; this state
    holds the buffer's documents, the generator's state and the position in the pass (the
    plan's segment and the examples read from it), so a resume gives the same documents in
    the same order. redivide() takes the states of every rank of another world size and
    splits what that pass had left (unread segments and buffered documents) over this world.
    """

    def __init__(self, dataset, rank: int, world: int, *, seed: int, buffer_size: int):
        self.dataset, self.rank, self.world, self.seed, self.buffer_size = dataset, rank, world, seed, buffer_size
        self.shards = dataset.num_shards
        self.epoch = 0
        # Epochs this rank finishes for a checkpoint of another world size: {epoch: {segments, buffer}}.
        self._carry: dict[int, dict] = {}
        self._resume: dict | None = None
        self._at = self._fresh(0)
        self._rng = None  # the live generator of self._at's pass

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self._resume is None and self._at["epoch"] != epoch:
            self._at, self._rng = self._fresh(epoch), None

    def carried(self, epoch: int) -> bool:
        """Whether `epoch` is a rest of another world's pass (it may give this rank nothing)."""
        return epoch in self._carry

    def plan(self, epoch: int | None = None) -> list[tuple[int, int, int, int]]:
        epoch = self.epoch if epoch is None else epoch
        if epoch in self._carry:
            return _segments(self._carry[epoch]["segments"])
        return shard_plan(self.shards, self.rank, self.world, shard_order(self.shards, self.seed, epoch, bool(self.buffer_size)))

    def _fresh(self, epoch: int) -> dict:
        buffered = self._carry.get(epoch, {}).get("buffer", [])
        return {"epoch": epoch, "place": 0, "read": 0, "draining": False, "rng": None, "buffer": list(buffered)}

    def __iter__(self):
        resume = self._resume if self._resume is not None and self._resume["epoch"] == self.epoch else None
        self._resume = None
        self._at, self._rng = resume or self._fresh(self.epoch), None
        return self._documents(self._at)

    def _documents(self, at: dict):
        # At every yield `at` and the generator describe exactly what is left to give.
        plan = self.plan(at["epoch"])
        rng = np.random.default_rng([self.seed, at["epoch"], 1 + self.rank])
        if at["rng"] is not None:
            rng.bit_generator.state = at["rng"]
        self._rng = rng
        items = at["buffer"]
        if not at["draining"]:
            for example in self._read(at, plan):
                if len(items) < self.buffer_size:
                    items.append(example)
                    continue
                if items:  # empty only with no buffer at all: stream order
                    i = int(rng.integers(len(items)))
                    example, items[i] = items[i], example
                yield example
            rng.shuffle(items)
            at["draining"] = True
        while items:
            yield items.pop()

    def _read(self, at: dict, plan):
        first = at["place"]
        for place in range(first, len(plan)):
            shard, start, every, offset = plan[place]
            begin = max(start, at["read"]) if place == first else start
            at["place"], at["read"] = place, begin
            examples = islice(self.dataset.shard(num_shards=self.shards, index=shard), begin, None)
            for index, example in enumerate(examples, begin):
                at["read"] = index + 1
                if index % every == offset:
                    yield example
        at["place"], at["read"] = len(plan), 0

    def state_dict(self) -> dict:
        at = self._resume if self._resume is not None else self._at
        live = self._rng is not None and at is self._at
        return {
            "kind": "documents",
            "world": self.world,
            "rank": self.rank,
            "shards": self.shards,
            "seed": self.seed,
            "shuffled": bool(self.buffer_size),
            **{key: at[key] for key in ("epoch", "place", "read", "draining")},
            "rng": self._rng.bit_generator.state if live else at["rng"],
            "buffer": list(at["buffer"]),
            # The pass's own plan, so the rest of it does not depend on this run's seed.
            "plan": [list(s) for s in self.plan(at["epoch"])],
            "carry": {str(e): c for e, c in self._carry.items() if e > at["epoch"]},
        }

    def _check(self, state: dict) -> None:
        if state.get("kind") != "documents":
            raise DataStateError(f"the checkpoint's data position is of a {state.get('kind')} stream, not of documents")
        if state["shards"] != self.shards:
            raise DataStateError(
                f"the checkpoint's data position is over {state['shards']} shards and this dataset has {self.shards}: "
                "a pass over other files cannot be continued"
            )

    def load_state_dict(self, state: dict) -> None:
        """The state of this same rank in a world of this same size."""
        self._check(state)
        self._carry = {int(e): c for e, c in state["carry"].items()}
        self._carry[state["epoch"]] = {"segments": state["plan"], "buffer": []}
        self._resume = {key: state[key] for key in ("epoch", "place", "read", "draining", "rng")}
        self._resume["buffer"] = list(state["buffer"])
        self.epoch = state["epoch"]
        self._at, self._rng = self._resume, None

    def redivide(self, states: list[dict]) -> None:
        """Continue the pass of every rank of a world of another size (`states`, by rank):
        each epoch any of them had not finished becomes carried segments (their unread
        segments dealt over this world) and buffered documents (theirs dealt one by one);
        then passes go on with this world's plan."""
        for state in states:
            self._check(state)
        first = min(s["epoch"] for s in states)
        last = max([s["epoch"] for s in states] + [int(e) for s in states for e in s["carry"]])
        carry = {}
        for epoch in range(first, last + 1):
            segments, buffered = [], []
            for state in states:
                rest, items = _unread(state, epoch)
                segments += rest
                buffered += items
            carry[epoch] = {"segments": [list(s) for s in deal(segments, self.rank, self.world)], "buffer": buffered[self.rank :: self.world]}
        self._carry, self._resume, self.epoch = carry, None, first
        self._at, self._rng = self._fresh(first), None


class TokenStream:
    """Documents packed (EOS-separated) into seq_len+1 token chunks, forever. Its state is
    the documents' (RankDocuments.state_dict), the tokens left over from the last document
    and the epoch, so a resume continues where the save was instead of replaying the stream."""

    def __init__(self, dataset, tokenizer, seq_len: int, text_field: str):
        self.dataset, self.tokenizer, self.seq_len, self.text_field = dataset, tokenizer, seq_len, text_field
        self.buffer: list[int] = []
        self.epoch = 0
        self._examples = None
        self._read_this_epoch = False

    def __iter__(self):
        return self

    def __next__(self) -> list[int]:
        eos = self.tokenizer.eos_token_id
        while len(self.buffer) < self.seq_len + 1:
            if self._examples is None:
                self.dataset.set_epoch(self.epoch)
                self._examples = iter(self.dataset)
            try:
                example = next(self._examples)
            except StopIteration:
                if not self._read_this_epoch and not self.dataset.carried(self.epoch):
                    raise RuntimeError(f"epoch {self.epoch} gave this rank no documents: fewer documents than ranks?") from None
                self.epoch, self._examples, self._read_this_epoch = self.epoch + 1, None, False
                self.dataset.set_epoch(self.epoch)  # the saved state is the new pass's start
                continue
            self._read_this_epoch = True
            self.buffer.extend(self.tokenizer(example[self.text_field], add_special_tokens=False)["input_ids"])
            if eos is not None:
                self.buffer.append(eos)
        chunk, self.buffer = self.buffer[: self.seq_len + 1], self.buffer[self.seq_len + 1 :]
        return chunk

    def state_dict(self) -> dict:
        data = self.dataset.state_dict()
        return {"kind": data["kind"], "world": data["world"], "rank": data["rank"], "dataset": data, "buffer": list(self.buffer), "epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state["dataset"])
        self.buffer, self.epoch, self._examples = list(state["buffer"]), int(state["epoch"]), None
        self._read_this_epoch = True

    def redivide(self, states: list[dict]) -> None:
        """The documents as RankDocuments.redivide; each old rank's left-over tokens (a
        document partly trained on) go whole to one rank."""
        self.dataset.redivide([s["dataset"] for s in states])
        rank, world = self.dataset.rank, self.dataset.world
        self.buffer = [t for i, s in enumerate(states) if i % world == rank for t in s["buffer"]]
        self.epoch, self._examples, self._read_this_epoch = self.dataset.epoch, None, True


class SyntheticTokens:
    """Uniform random tokens: throughput runs with no tokenizer or dataset to fetch. Its
    state is the generator's, so a resume draws what the run would have drawn."""

    def __init__(self, vocab: int, seq_len: int, seed: int, *, rank: int = 0, world: int = 1):
        self.vocab, self.seq_len, self.seed, self.rank, self.world = vocab, seq_len, seed, rank, world
        self.drawn = 0
        self.generator = torch.Generator().manual_seed(seed + rank)

    def __iter__(self):
        return self

    def __next__(self) -> list[int]:
        self.drawn += 1
        return torch.randint(self.vocab, (self.seq_len + 1,), generator=self.generator).tolist()

    def state_dict(self) -> dict:
        generator = base64.b64encode(self.generator.get_state().numpy().tobytes()).decode()
        return {"kind": "synthetic", "world": self.world, "rank": self.rank, "drawn": self.drawn, "generator": generator}

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") != "synthetic":
            raise DataStateError(f"the checkpoint's data position is of a {state.get('kind')} stream, not of synthetic tokens")
        self.drawn = state["drawn"]
        self.generator.set_state(torch.frombuffer(bytearray(base64.b64decode(state["generator"])), dtype=torch.uint8))

    def redivide(self, states: list[dict]) -> None:
        """An old rank's stream goes on where there is one; a new rank's starts from a seed
        of (seed, rank, tokens drawn so far), not from the start of rank's first stream."""
        if self.rank < len(states):
            self.load_state_dict(states[self.rank])
        else:
            drawn = sum(s["drawn"] for s in states)
            self.generator.manual_seed(int(np.random.SeedSequence([self.seed, self.rank, drawn]).generate_state(1)[0]))


def batches(chunks, batch_size: int, device, skip: int = 0):
    """(inputs, targets): targets are the inputs' next tokens, each row one chunk."""
    for _ in range(skip):  # a resume without saved stream state: replay to this rank's position
        next(chunks)
    while True:
        rows = torch.tensor([next(chunks) for _ in range(batch_size)], dtype=torch.long)
        yield rows[:, :-1].to(device, non_blocking=True), rows[:, 1:].to(device, non_blocking=True)


# ---------------------------------------------------------------- model


def model_config(preset: Preset, vocab_size: int):
    """The transformers LlamaConfig of `preset`, its embedding sized to the tokenizer."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        max_position_embeddings=preset.max_positions,
        rope_theta=preset.rope_theta,
        rope_scaling=dict(preset.rope_scaling) if preset.rope_scaling else None,
        rms_norm_eps=preset.rms_norm_eps,
        tie_word_embeddings=False,
        use_cache=False,
    )


def build_model(config):
    """On the meta device: no memory and no time, whatever the size; shard, then materialise."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(config)


def logits_of(model, inputs):
    """The model's logits for `inputs`. The all-ones attention mask says there is no padding:
    without one, transformers 4.53 takes the position ids it makes for a check of packed
    sequences and hands SDPA a (batch, 1, seq, seq) mask, which rules out its flash kernel; with
    it, SDPA is told is_causal instead (masking_utils: _preprocess_mask_arguments,
    _ignore_causal_mask_sdpa)."""
    return model(input_ids=inputs, attention_mask=torch.ones_like(inputs)).logits


def next_token_loss(logits, targets):
    """Mean cross-entropy of each position's logits against its next token. `targets` are
    already the next tokens (batches() shifts them), so nothing is shifted here."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def shard(model, device, *, bf16: bool, activation_checkpointing: str, compile_layers: bool, units: str):
    """FSDP2 over the meta model: each decoder layer a unit (tuned: the embedding and the
    head too), then the root."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    layers = model.model.layers
    if activation_checkpointing != "none":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

        every = 2 if activation_checkpointing == "selective" else 1
        for i, layer in enumerate(layers):
            if i % every == 0:
                layers[i] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    if compile_layers:
        for layer in layers:
            layer.compile()  # in place: parameter names, and so checkpoints, stay the same
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        # The last layer's backward comes first: resharding it after forward would only regather it.
        fully_shard(layer, mp_policy=mp, reshard_after_forward=not (units == "tuned" and i == last))
    if units == "tuned":
        fully_shard(model.model.embed_tokens, mp_policy=mp)
        fully_shard(model.lm_head, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mp_policy=mp)
    return model


def materialise(model, device, seed: int):
    """Allocate the sharded parameters on `device` and initialise them as transformers does
    (normal(0, initializer_range) for linear and embedding weights, ones for RMSNorm), each
    rank's shard from its own seed; rebuild the rotary buffers, which meta cannot hold."""
    model.to_empty(device=device)
    std = model.config.initializer_range
    torch.manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    torch.nn.init.zeros_(module.bias)
            elif type(module).__name__.endswith("RMSNorm"):
                torch.nn.init.ones_(module.weight)
    rotary = model.model.rotary_emb
    model.model.rotary_emb = type(rotary)(config=model.config, device=device)
    return model


def lr_schedule(args, scale: float = 1.0):
    """Linear warm-up, then cosine decay to min_lr_ratio; every value times `scale` (the
    global batch's against the recipe's: recipe_world)."""
    def factor(step: int) -> float:
        if step < args.warmup_steps:
            return scale * (step + 1) / max(1, args.warmup_steps)
        progress = min(1.0, (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps))
        return scale * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    return factor


def recipe_world(ckpt: str | None, world: int) -> int:
    """The world size the learning rate is given for: the first run's, carried in every
    checkpoint's manifest (an older manifest, without it: this world)."""
    if not ckpt:
        return world
    manifest = json.loads(_fs(ckpt).cat_file(_join(ckpt, MANIFEST)))
    return int(manifest.get("recipe_world", world))


def passed_over(base: str | None, rank: int) -> list[list[int]]:
    """The windows [first, last] of steps earlier runs stopped on (rank 0 reads, every rank
    takes its reading)."""
    windows = [[]]
    if base and rank == 0:
        record = _join(base, NONFINITE_RECORD)
        fs = _fs(base)
        windows = [json.loads(fs.cat_file(record))["windows"] if fs.exists(record) else []]
    dist.broadcast_object_list(windows, src=0)
    return windows[0]


def record_nonfinite(base: str, first: int, last: int, rank: int) -> str:
    """Add [first, last] to the record beside the checkpoints (rank 0 writes); its path."""
    record = _join(base, NONFINITE_RECORD)
    if rank == 0:
        fs = _fs(base)
        windows = json.loads(fs.cat_file(record))["windows"] if fs.exists(record) else []
        fs.makedirs(base, exist_ok=True)
        fs.pipe_file(record, json.dumps({"windows": windows + [[first, last]]}).encode())
    return record


def device_peak_tflops(args, device) -> float | None:
    """Dense bf16 TFLOPS of one device, for MFU: --peak-tflops, else from the GPU's name."""
    if args.peak_tflops:
        return args.peak_tflops
    if device.type != "cuda":
        return None
    return peak_tflops(torch.cuda.get_device_name(device))


# ---------------------------------------------------------------- checkpoints


def _fs(path: str):
    import fsspec

    return fsspec.core.url_to_fs(path)[0]


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _step_dirs(fs, base: str) -> list[tuple[int, str]]:
    """(step, dir) of every step_<n> folder under `base`, complete or not."""
    if not fs.exists(base):
        return []
    found = []
    for entry in fs.ls(base, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        match = re.fullmatch(r"step_(\d+)", name)
        if match:
            found.append((int(match.group(1)), _join(base, name)))
    return found


def complete_checkpoints(base: str) -> list[tuple[int, str]]:
    """(step, dir) of every complete checkpoint under `base`, newest first."""
    fs = _fs(base)
    return sorted(((step, ckpt) for step, ckpt in _step_dirs(fs, base) if _is_complete(fs, ckpt)), reverse=True)


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


def choose_checkpoint(base: str | None, rank: int) -> tuple[int, str | None]:
    """Rank 0 picks the newest complete checkpoint and every rank takes its pick, so ranks
    cannot resume from different steps (a listing racing a save, or an eventually
    consistent store)."""
    choice = [(0, None)]
    if base and rank == 0:
        found = complete_checkpoints(base)
        choice = [found[0] if found else (0, None)]
    dist.broadcast_object_list(choice, src=0)
    return choice[0]


def save_checkpoint(base: str, step: int, model, optimizer, stream, rank: int, keep: int, *, background=None, recipe: dict | None = None):
    """Every rank's shards of the weights and optimizer state and its data position, then
    rank 0's manifest: returns the complete checkpoint's path. With `background` (a gloo
    group of every rank, for the writer's own collectives) the state is copied to host
    memory and written by a thread: returns that write's Future, and complete_checkpoint
    writes the manifest once every rank's future is done."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    ckpt = _join(base, f"step_{step:08d}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    writer, _ = _writer_reader(ckpt)
    _fs(ckpt).makedirs(ckpt, exist_ok=True)
    save_data_state(ckpt, stream, rank)  # small, and of this very step
    if background is not None:
        return dcp.async_save({"model": model_sd, "optim": optim_sd}, storage_writer=writer, process_group=background)
    dcp.save({"model": model_sd, "optim": optim_sd}, storage_writer=writer)
    dist.barrier()  # every rank's shards are written before the manifest says so
    complete_checkpoint(base, step, rank, keep, recipe=recipe)
    dist.barrier()
    return ckpt


def complete_checkpoint(base: str, step: int, rank: int, keep: int, *, recipe: dict | None = None) -> str:
    """Rank 0 lists what every rank wrote in the manifest (with `recipe`: the world sizes the
    run is trained on and its learning rate is given for), then prunes. Call once every
    rank's write of `step` is done."""
    ckpt = _join(base, f"step_{step:08d}")
    if rank == 0:
        fs = _fs(ckpt)
        files = {
            e["name"].rstrip("/").rsplit("/", 1)[-1]: e["size"]
            for e in fs.ls(ckpt, detail=True)
            if e["type"] == "file" and not e["name"].endswith(MANIFEST)
        }
        tmp = _join(ckpt, MANIFEST + ".tmp")
        fs.pipe_file(tmp, json.dumps({"step": step, "files": files, **(recipe or {})}).encode())
        fs.mv(tmp, _join(ckpt, MANIFEST))
        prune_checkpoints(base, keep)
    return ckpt


def prune_checkpoints(base: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` complete checkpoints, and any partial one older than
    the newest complete one (a save that died). Returns what was deleted."""
    fs = _fs(base)
    complete = complete_checkpoints(base)
    if not complete:
        return []
    kept = {path for _, path in complete[:keep]}
    newest = complete[0][0]
    doomed = [path for step, path in _step_dirs(fs, base) if path not in kept and step < newest]
    for path in doomed:
        fs.rm(path, recursive=True)
    return doomed


def load_checkpoint(ckpt: str, model, optimizer, stream, rank: int, world: int) -> str | None:
    """Weights and optimizer state (torch.distributed.checkpoint reshards them to this
    world), then the data position (load_data_state)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    _, reader = _writer_reader(ckpt)
    dcp.load(state, storage_reader=reader)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return load_data_state(ckpt, stream, rank, world)


def save_data_state(ckpt: str, stream, rank: int) -> None:
    """This rank's data position (its stream's state_dict: with documents, the shuffle buffer
    too, some MB for C4's 10,000 documents) beside the model's shards."""
    _fs(ckpt).pipe_file(_join(ckpt, DATA_STATE.format(rank=rank)), json.dumps(stream.state_dict()).encode())


def load_data_state(ckpt: str, stream, rank: int, world: int) -> str | None:
    """Put `stream` where the checkpoint's pass was. In a world of the saved size each rank
    reads its own state; in another each reads all of them and takes its part of what they
    had left (stream.redivide), so no document is skipped or read twice. Returns how it
    resumed, or None where the checkpoint has no data state of this format (the caller
    replays the stream). Raises DataStateError where the pass cannot be continued."""
    fs = _fs(ckpt)
    own = _join(ckpt, DATA_STATE.format(rank=rank))
    state = json.loads(fs.cat_file(own)) if fs.exists(own) else None
    if state is not None and "world" not in state:
        return None  # an older checkpoint's position, without its shuffle buffer
    if state is not None and state["world"] == world:
        stream.load_state_dict(state)
        return "data position continued"
    names = sorted(e for e in fs.ls(ckpt, detail=False) if re.fullmatch(r"data_rank\d{5}\.json", e.rstrip("/").rsplit("/", 1)[-1]))
    if not names:
        return None
    states = [json.loads(fs.cat_file(name)) for name in names]
    if any("world" not in s for s in states):
        return None
    saved_world = states[0]["world"]
    if [s["rank"] for s in states] != list(range(saved_world)) or any(s["world"] != saved_world for s in states):
        raise DataStateError(
            f"it holds the data position of ranks {[s['rank'] for s in states]} of a world of {saved_world}; "
            "without every rank's the pass cannot be re-divided"
        )
    stream.redivide(states)
    return f"data position of {saved_world} rank{'s' * (saved_world > 1)} re-divided over {world}"


# ---------------------------------------------------------------- training


def step_verdict(loss, grad_norm, stop: StopRequest, world: int, device, writing: bool = False) -> tuple[float, float, list[int], int]:
    """The step's one host sync, before the optimizer step: one all-reduce of the loss, the
    gradient norm, the stop signals each rank got and whether its background save is still
    writing. Returns the mean loss, the norm (the same on every rank: clip_grad_norm_
    reduces it over the shards), the signals asked anywhere and the ranks still writing, so
    every rank takes the same decision on the same step."""
    if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP, already replicated
        grad_norm = grad_norm.full_tensor()
    flags = torch.tensor([float(stop.signum == s) for s in StopRequest.SIGNALS] + [float(writing)], dtype=torch.float64)
    verdict = torch.cat([torch.stack([loss.detach().double(), grad_norm.detach().double()]), flags.to(device)])
    dist.all_reduce(verdict)  # SUM (gloo has no AVG); float64, so large finite values stay finite
    total_loss, total_norm, *counts, writers = verdict.tolist()
    return total_loss / world, total_norm / world, [s for s, n in zip(StopRequest.SIGNALS, counts) if n], int(writers)


def state_is_finite(model, optimizer, device) -> bool:
    """Whether every rank's shard of the weights and of the optimizer's moments is finite: a
    finite step can still overflow them, and a checkpoint must never hold that."""
    bad = torch.zeros((), device=device)
    tensors = list(model.parameters()) + [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if local.is_floating_point():
            bad += (~torch.isfinite(local)).sum().to(device)
    dist.all_reduce(bad)
    return bad.item() == 0


def train(args) -> int:
    rank, world, local_rank, device = setup_distributed()
    stop = StopRequest(args.stop_timeout, lambda line: log(line, local_rank=local_rank))
    try:
        return _train(args, rank, world, local_rank, device, stop)
    finally:
        stop.close()


def _train(args, rank: int, world: int, local_rank: int, device, stop: StopRequest) -> int:
    preset = PRESETS[args.model]
    if args.layers:
        preset = Preset(**{**preset.__dict__, "layers": args.layers})
    use_bf16 = args.bf16 == "on" or (args.bf16 == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    if args.synthetic_data:
        vocab = preset.vocab
        stream = SyntheticTokens(vocab, args.seq_len, args.seed, rank=rank, world=world)
    else:
        from transformers import AutoTokenizer

        secret = load_hf_token()
        if secret:
            log(f"hugging face token: read from Secrets Manager secret {secret}", local_rank=local_rank)
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        vocab = len(tokenizer)
        stream = TokenStream(load_stream(args, rank, world), tokenizer, args.seq_len, args.text_field)
    if vocab != preset.vocab:
        log(f"note: tokenizer vocabulary {vocab} differs from the preset's published {preset.vocab}; "
            "the embedding follows the tokenizer", local_rank=local_rank)
    config = model_config(preset, vocab)
    model = shard(
        build_model(config),
        device,
        bf16=use_bf16,
        activation_checkpointing=args.activation_checkpointing,
        compile_layers=args.compile,
        units=args.fsdp_units,
    )
    materialise(model, device, args.seed + rank)
    start, ckpt = choose_checkpoint(args.checkpoint_dir, rank)
    # The windows of steps earlier runs stopped on with non-finite values: replaying them from the
    # last checkpoint would fail the same way, so their batches are passed over; past the limit a
    # start ends at once (the operator restarts the pods on any exit; its retries run out).
    windows = passed_over(args.checkpoint_dir, rank)
    if len(windows) > args.max_nonfinite_restarts:
        listed = ", ".join(f"{first}-{last}" for first, last in windows)
        log(NONFINITE_GIVE_UP_LINE.format(windows=f"steps {listed}", count=len(windows), limit=args.max_nonfinite_restarts,
                                          record=_join(args.checkpoint_dir, NONFINITE_RECORD)), local_rank=local_rank)
        stop.reported = True
        dist.destroy_process_group()
        return 4
    # (The last step is trained on all the same: a lone non-finite step is skipped, and the run ends saved.)
    passing = {step for first, last in windows for step in range(first, last + 1) if start < step < args.max_steps}
    # An elastic resume on another world size trains on another global batch: the learning rate
    # follows it (Goyal et al., 2017, the linear scaling rule), the steps and warm-up stay.
    recipe = {"world": world, "recipe_world": recipe_world(ckpt, world)}
    scale = world / recipe["recipe_world"]
    if scale != 1:
        log(LR_SCALED_LINE.format(recipe_world=recipe["recipe_world"], world=world, recipe_batch=args.batch_size * recipe["recipe_world"],
                                  batch=args.batch_size * world, scale=scale, recipe_lr=args.lr, lr=args.lr * scale), local_rank=local_rank)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=args.lr,
        betas=(0.9, 0.95),
        weight_decay=args.weight_decay,
        **({"fused": True} if args.fused_optimizer else {}),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(args, scale))
    skip = 0
    if ckpt:
        try:
            resumed = load_checkpoint(ckpt, model, optimizer, stream, rank, world)
        except DataStateError as error:
            log(f"cannot resume from {ckpt}: {error}", local_rank=local_rank)
            dist.destroy_process_group()
            return 2
        if resumed is None:
            skip = start * args.batch_size
            log(f"no stream state for rank {rank} in {ckpt}: replaying {skip} chunks", local_rank=local_rank)
        elif resumed != "data position continued":
            log(resumed, local_rank=local_rank)
        for _ in range(start):
            scheduler.step()
        log(f"resumed from {ckpt} at step={start}", local_rank=local_rank)
    for first, last in windows:
        if any(first <= step <= last for step in passing):
            log(PASSED_OVER_LINE.format(first=max(first, start + 1), last=min(last, args.max_steps - 1)), local_rank=local_rank)
    data = batches(stream, args.batch_size, device, skip=skip)
    peak = device_peak_tflops(args, device)
    tokens_per_step = args.batch_size * args.seq_len * world
    total_params, _ = parameters(preset, vocab)
    log(
        f"training model={args.model} params={total_params / 1e6:.1f}M world={world} device={device.type} "
        f"bf16={use_bf16} start_step={start} max_steps={args.max_steps}",
        local_rank=local_rank,
    )

    model.train()
    # A gloo group of its own for the background writer's collectives, which run in its
    # thread beside the training's on the default group.
    background = dist.new_group(backend="gloo") if args.async_checkpoint and args.checkpoint_dir else None
    writing = None  # (step, future, seconds training waited) of a background save not yet complete
    saved = stop.saved = start
    in_a_row = skipped = 0
    pending: list[tuple[int, float, float] | str] = []  # loss lines wait for their window's tokens/s
    window_start = time.perf_counter()

    def flush():
        nonlocal window_start
        tps = tokens_per_step * len(pending) / (time.perf_counter() - window_start)
        for entry in pending:
            if isinstance(entry, str):
                log(entry, local_rank=local_rank)
                continue
            s, value, lr = entry
            line = LOSS_LINE.format(step=s, loss=value, lr=lr, tps=tps)
            if peak:
                line += f" mfu={mfu(tps, preset, vocab, args.seq_len, world, peak):.3f}"
            log(line, local_rank=local_rank)
        pending.clear()
        window_start = time.perf_counter()

    def finish(line: str, code: int) -> int:
        log(line, local_rank=local_rank)
        stop.reported = True
        try:
            dist.destroy_process_group()
        except RuntimeError:
            pass  # a broken group: the process ends anyway
        return code

    def complete_background_save(wait: bool) -> None:
        """The background save's manifest and line: at once when every rank's write is done
        (the step verdict says so), or after waiting for it (wait: a stop, the end)."""
        nonlocal writing, saved
        step_, future, waited = writing
        writing = None
        future.result()  # its exception, if the write failed
        if wait:
            dist.barrier()
        path = complete_checkpoint(args.checkpoint_dir, step_, rank, args.keep_checkpoints, recipe=recipe)
        saved = stop.saved = step_
        log(CHECKPOINT_LINE.format(step=step_, path=path, seconds=waited), local_rank=local_rank)

    def pass_over_next(first: int, last: int) -> str:
        """Record the window for the restart; the words that say so ("" without checkpoints)."""
        if not args.checkpoint_dir:
            return ""
        return "; " + PASS_OVER_NEXT_LINE.format(first=first, last=last, record=record_nonfinite(args.checkpoint_dir, first, last, rank))

    def stopped_without_save(signum: int, why: str, error: Exception) -> int:
        why = f"{why} ({str(error).splitlines()[0][:200]})"
        return finish(NO_SAVE_STOP_LINE.format(signal=signal.Signals(signum).name, why=why, saved=saved), 128 + signum)

    for step in range(start + 1, args.max_steps + 1):
        inputs, targets = next(data)
        if step in passing:  # its batch taken and left, the schedule moved on
            scheduler.step()
            continue
        loss = next_token_loss(logits_of(model, inputs), targets)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        try:
            loss_value, norm, asked, writers = step_verdict(loss, grad_norm, stop, world, device, writing is not None and not writing[1].done())
        except RuntimeError as error:  # a peer gone: gloo raises, NCCL's watchdog aborts
            if not stop.signum:
                raise
            flush()
            return stopped_without_save(stop.signum, f"the process group broke at step={step}", error)
        lr = scheduler.get_last_lr()[0]
        if math.isfinite(loss_value) and math.isfinite(norm):
            optimizer.step()
            in_a_row = 0
            pending.append((step, loss_value, lr))
        else:
            # Skipped: the weights and the optimizer's moments stay as they were.
            in_a_row, skipped = in_a_row + 1, skipped + 1
            pending.append(SKIPPED_LINE.format(step=step, loss=loss_value, norm=norm, in_a_row=in_a_row, total=skipped))
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        if writing is not None and not writers:
            flush()
            complete_background_save(wait=False)
        if in_a_row >= args.max_nonfinite_steps:
            flush()
            if writing is not None:  # its state was finite: finish it before stopping
                complete_background_save(wait=True)
            line = NONFINITE_STOP_LINE.format(count=in_a_row, first=step - in_a_row + 1, last=step, saved=saved)
            return finish(line + pass_over_next(step - in_a_row + 1, step), 3)
        stopping = bool(asked)
        save_now = args.checkpoint_dir and (step % args.checkpoint_interval == 0 or step == args.max_steps or stopping)
        # The first step is printed at once: the JobStart rule waits for it.
        if len(pending) >= args.log_interval or save_now or stopping or in_a_row or step in (start + 1, args.max_steps):
            flush()
        signum = (stop.signum or asked[0]) if stopping else None
        if save_now:
            t0 = time.perf_counter()
            # The last save and a stop's are complete before the process ends.
            in_background = background is not None and not stopping and step != args.max_steps
            try:
                if writing is not None:  # the last one still writing: this one waits for it
                    complete_background_save(wait=True)
                finite = state_is_finite(model, optimizer, device)
                if finite:
                    path = save_checkpoint(args.checkpoint_dir, step, model, optimizer, stream, rank, args.keep_checkpoints,
                                           background=background if in_background else None, recipe=recipe)
            except RuntimeError as error:  # a peer gone mid-save
                if not stopping:
                    raise
                return stopped_without_save(signum, f"the save at step={step} failed", error)
            if not finite:
                return finish(UNSAFE_STATE_LINE.format(step=step, saved=saved) + pass_over_next(step, step), 3)
            if in_background:
                writing = (step, path, time.perf_counter() - t0)
            else:
                saved = stop.saved = step
                log(CHECKPOINT_LINE.format(step=step, path=path, seconds=time.perf_counter() - t0), local_rank=local_rank)
        if stopping:
            return finish(SIGNAL_STOP_LINE.format(signal=signal.Signals(signum).name, step=step, saved=saved), 128 + signum)
    if writing is not None:
        complete_background_save(wait=True)
    log(f"training finished step={args.max_steps}", local_rank=local_rank)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args()))
