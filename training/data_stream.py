"""The data: a streamed dataset (C4 by default, or local text files) dealt over the ranks so
each document is read by exactly one rank in each pass, whatever the world size; packed into
token chunks; its position (the shuffle buffer too) saved and continued exactly, on the same
world size or re-divided over another. Synthetic tokens for throughput runs. The gated
tokenizer's Hugging Face token from Secrets Manager.

Beside train.py in the image, which imports it as a sibling (`from data_stream import ...`).
"""

from __future__ import annotations

import base64
import json
import math
import os
from itertools import islice
from typing import NamedTuple

import numpy as np
import torch

from log_format import HF_TOKEN_SECRET_ENV


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


# Each example a rank reads carries where it sits in the dataset, [shard, index], under this
# key: with the pass's epoch it names the document whatever the world size, so a window of
# documents to pass over (a non-finite stop's) means the same documents on any world.
DOCUMENT = "_document"


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
                    yield {**example, DOCUMENT: [shard, index]}
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
    """Documents, each between the tokenizer's begin- and end-of-text tokens, packed into seq_len+1 token chunks, forever. Its state is
    the documents' (RankDocuments.state_dict), the tokens left over from the last document
    (with the document they are of) and the epoch, so a resume continues where the save was
    instead of replaying the stream.

    Each chunk's documents, (epoch, shard, index), are in `chunk_documents`: a non-finite stop
    records them, and pass_over() drops those documents wherever they come, on this world
    size or another, their left-over tokens too."""

    def __init__(self, dataset, tokenizer, seq_len: int, text_field: str):
        self.dataset, self.tokenizer, self.seq_len, self.text_field = dataset, tokenizer, seq_len, text_field
        self.buffer: list[int] = []
        # The buffer's tokens by document, in order: [epoch, shard, index, tokens] ([None] * 3: unknown).
        self.owners: list[list] = []
        self.chunk_documents: list[tuple] = []
        self.passed_over: set[tuple] = set()
        self.dropped = 0  # documents passed over by this process
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
            key = (self.epoch, *example[DOCUMENT]) if example.get(DOCUMENT) else (None, None, None)
            if key in self.passed_over:
                self.dropped += 1
                continue
            # As Llama 3 trains: <|begin_of_text|> before each document, <|end_of_text|> after it
            # (torchtitan's text datasets encode add_bos and add_eos alike).
            ids = self.tokenizer(example[self.text_field], add_special_tokens=False)["input_ids"]
            if self.tokenizer.bos_token_id is not None:
                ids.insert(0, self.tokenizer.bos_token_id)
            if eos is not None:
                ids.append(eos)
            self.buffer.extend(ids)
            self.owners.append([*key, len(ids)])
        chunk, self.buffer = self.buffer[: self.seq_len + 1], self.buffer[self.seq_len + 1 :]
        self.chunk_documents = self._take_owners(self.seq_len + 1)
        return chunk

    def _take_owners(self, count: int) -> list[tuple]:
        """The documents of the next `count` tokens, taken off the owners' list."""
        taken = []
        while count and self.owners:
            owner = self.owners[0]
            n = min(count, owner[3])
            if owner[0] is not None or owner[1] is not None:
                taken.append(tuple(owner[:3]))
            owner[3] -= n
            count -= n
            if not owner[3]:
                self.owners.pop(0)
        return taken

    def pass_over(self, documents) -> None:
        """Drop `documents` ((epoch, shard, index) each) wherever they come from now on, and
        the left-over tokens of any of them already in the buffer."""
        self.passed_over |= {tuple(d) for d in documents}
        kept, owners, at = [], [], 0
        for owner in self.owners:
            run = self.buffer[at : at + owner[3]]
            at += owner[3]
            if tuple(owner[:3]) in self.passed_over:
                self.dropped += 1
                continue
            kept += run
            owners.append(owner)
        self.buffer, self.owners = kept + self.buffer[at:], owners

    def state_dict(self) -> dict:
        data = self.dataset.state_dict()
        return {"kind": data["kind"], "world": data["world"], "rank": data["rank"], "dataset": data, "buffer": list(self.buffer),
                "owners": [list(o) for o in self.owners], "epoch": self.epoch}

    def _own(self, state: dict) -> list[list]:
        # A state saved before owners were: its left-over tokens are of no known document.
        return [list(o) for o in state["owners"]] if "owners" in state else ([[None, None, None, len(state["buffer"])]] if state["buffer"] else [])

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state["dataset"])
        self.buffer, self.owners, self.epoch, self._examples = list(state["buffer"]), self._own(state), int(state["epoch"]), None
        self._read_this_epoch = True

    def redivide(self, states: list[dict]) -> None:
        """The documents as RankDocuments.redivide; each old rank's left-over tokens (a
        document partly trained on) go whole to one rank."""
        self.dataset.redivide([s["dataset"] for s in states])
        rank, world = self.dataset.rank, self.dataset.world
        mine = [s for i, s in enumerate(states) if i % world == rank]
        self.buffer = [t for s in mine for t in s["buffer"]]
        self.owners = [o for s in mine for o in self._own(s)]
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


def document_segments(rows: torch.Tensor, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's document within its row (a new one begins after every end-of-text token)
    and its position counted from that document's start, for document masking."""
    starts = torch.zeros_like(rows, dtype=torch.bool)
    starts[:, 1:] = rows[:, :-1] == eos
    documents = starts.long().cumsum(1)
    index = torch.arange(rows.shape[1]).expand_as(rows)
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(1).values
    return documents, index - first


class Batch(NamedTuple):
    inputs: torch.Tensor
    targets: torch.Tensor
    documents: list  # (epoch, shard, index) of every document the rows hold tokens of
    segments: tuple | None  # document_segments of the inputs, on the device, with document masking


def batches(chunks, batch_size: int, device, skip: int = 0, mask_documents_after: int | None = None):
    """Batches: targets are the inputs' next tokens, each row one chunk; documents, those the
    rows hold tokens of (none for a stream without documents); with `mask_documents_after` (the
    end-of-text token), the inputs' document segments, computed here on the CPU."""
    for _ in range(skip):  # a resume without saved stream state: replay to this rank's position
        next(chunks)
    while True:
        rows, documents = [], []
        for _ in range(batch_size):
            rows.append(next(chunks))
            documents += getattr(chunks, "chunk_documents", [])
        rows = torch.tensor(rows, dtype=torch.long)
        segments = None
        if mask_documents_after is not None:
            segments = tuple(t.to(device, non_blocking=True) for t in document_segments(rows[:, :-1], mask_documents_after))
        yield Batch(rows[:, :-1].to(device, non_blocking=True), rows[:, 1:].to(device, non_blocking=True), documents, segments)
