"""How the training tests run train.py: as one plain process (WORLD_SIZE 1, no torchrun, the
quickest real run), or its train() in the test's own process (the imports paid once), with the
arguments the rendered job passes; what a run printed and saved, read back."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from infra import validation
from manifests import job as job_manifest
from tests.bench import bench_train
from tests.conftest import CONTEXT, ROOT

if TYPE_CHECKING:
    import argparse

    import torch

TRAIN = ROOT / "training" / "train.py"
# torchrun's --standalone ranks, forked after the imports (fork_ranks.py).
FORK_RANKS = Path(__file__).with_name("fork_ranks.py")


class RankServer:
    """fork_ranks.py: each launch of train.py's ranks forked from one process that has
    made their imports once, for all the launches of a test module."""

    def __init__(self):
        self._server = subprocess.Popen([sys.executable, str(FORK_RANKS)], env=bench_train.offline_env(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, world: int, script: Path, args: list[str], *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        """`script` on `world` ranks in `cwd` with `env` (the ranks' whole environment), as torchrun
        would run it: its exit status, stdout and stderr."""
        with tempfile.TemporaryDirectory() as out:
            request = {"world": world, "script": str(script), "args": args, "cwd": str(cwd), "env": env,
                       "stdout": f"{out}/stdout", "stderr": f"{out}/stderr"}
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            if not select.select([self._server.stdout], [], [], timeout)[0]:
                self.close()
                raise subprocess.TimeoutExpired([str(script), *args], timeout)
            answer = self._server.stdout.readline()
            if not answer:
                raise RuntimeError(f"fork_ranks.py ended with {self._server.wait()}")
            output = [Path(out, name).read_text() for name in ("stdout", "stderr")]
        return subprocess.CompletedProcess([str(script), *args], json.loads(answer)["status"], *output)

    def close(self) -> None:
        os.killpg(self._server.pid, signal.SIGKILL)  # the server, and any launch and rank still running
        self._server.wait()


def plain_command(work: Path, *args: str) -> list[str]:
    """One plain process (WORLD_SIZE 1), no torchrun: the quickest real run."""
    return [
        sys.executable, str(TRAIN), "--model=tiny", f"--tokenizer={work / 'tok'}", f"--data-files={work / 'corpus.txt'}",
        "--seq-len=32", "--batch-size=4", "--lr=3e-3", "--warmup-steps=3", "--shuffle-buffer=0", *args,
    ]


def losses_of(out: str) -> dict[int, float]:
    return {int(m[0]): float(m[1]) for m in re.findall(r"^step=(\d+) loss=(\S+) ", out, flags=re.M)}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_env() -> dict:
    """A free rendezvous port for each single-process run."""
    # One compile thread: no pool of inductor worker processes for the test to wait on.
    return {**bench_train.offline_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "TORCHINDUCTOR_COMPILE_THREADS": "1"}


def train_in_process(work: Path, *args: str) -> tuple[int, str]:
    """train.py's train() in this process (one rank, gloo): the imports are paid once for all
    the runs that use it. Returns its exit code and what it printed."""
    import contextlib
    import io
    import os

    import datasets.config

    import torch

    env = single_env()
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out = io.StringIO()
    # One thread, as OMP_NUM_THREADS=1 gives the subprocess runs: a tiny model's matmuls are
    # ten times slower split over cores that other work is using.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # load_dataset counts each load with a request to the Hub unless offline: seconds here.
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
            patch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
            train = train_module()
            code = train.train(train.parse_args(plain_command(work, *args)[2:]))
    finally:
        torch.set_num_threads(threads)
        for k, v in saved_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return code, out.getvalue()


def train_module():
    if str(ROOT / "training") not in sys.path:
        sys.path.insert(0, str(ROOT / "training"))
    import train

    return train


def saved_tensors(ckpt: Path, scratch: Path) -> dict[str, "torch.Tensor"]:
    """A checkpoint's weights and optimizer state by name, read as torch's own converter reads
    it (no process group): "model.<param>" and "optim.<param>.<step|exp_avg|exp_avg_sq>"."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(ckpt, scratch / f"{ckpt.name}.pt")
    saved = torch.load(scratch / f"{ckpt.name}.pt", weights_only=False)
    tensors = {f"model.{name}": value for name, value in saved["model"].items()}
    for name, state in saved["optim"]["state"].items():
        tensors.update({f"optim.{name}.{key}": value for key, value in state.items()})
    return tensors


def job_train_args() -> "argparse.Namespace":
    """train.py's arguments as the rendered job passes them (its defaults where the job is silent)."""
    settings, _ = validation.load_settings(CONTEXT, "prod")
    command = job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    return train_module().parse_args(command[command.index("/workspace/train.py") + 1 :])


# A corpus whose every token names its document: document i is the word "d<i>" repeated, and the
# tokenizer is word-level, so the tokens a step trained on say which documents it read, and how
# much of each, with no help from train.py's own bookkeeping.
SPECIALS = ("<unk>", "<s>", "</s>")


def document_corpus(folder: Path, *, shards: int = 8, per_shard: int = 50) -> tuple[list[str], dict[int, int]]:
    """Text files of `shards` x `per_shard` documents and a word-level tokenizer for them in
    folder/"tok". Returns the files and each document's length in tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    lengths, files = {}, []
    for shard in range(shards):
        lines = []
        for line in range(per_shard):
            doc = shard * per_shard + line
            lengths[doc] = 3 + (doc * 7) % 10
            lines.append(" ".join([f"d{doc:04d}"] * lengths[doc]))
        files.append(str(folder / f"part-{shard:02d}.txt"))
        Path(files[-1]).write_text("\n".join(lines) + "\n")
    vocab = {token: i for i, token in enumerate(SPECIALS)} | {f"d{doc:04d}": len(SPECIALS) + doc for doc in lengths}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(folder / "tok")
    return files, lengths


def document_tokens(rows) -> "Counter[int]":
    """How many tokens of each document `rows` (token ids) hold."""
    from collections import Counter

    return Counter(t - len(SPECIALS) for row in rows for t in row if t >= len(SPECIALS))


def documents_touched(calls: list[list[list[int]]], wanted: set[int]) -> set[int]:
    """The documents any token of the calls numbered in `wanted` (from 1) belongs to, where
    `calls` are one rank's chunks in the order it read them: an end-of-text token is its
    document's (the one before it), a begin-of-text token the next one's."""
    eos, bos = SPECIALS.index("</s>"), SPECIALS.index("<s>")
    owner_of, last, pending = [], None, []
    for call in calls:
        for row in call:
            for token in row:
                if token >= len(SPECIALS):
                    last = token - len(SPECIALS)
                    for index in pending:
                        owner_of[index] = last
                    pending = []
                    owner_of.append(last)
                elif token == bos:
                    pending.append(len(owner_of))
                    owner_of.append(None)
                else:
                    owner_of.append(last if token == eos else None)
    touched, at = set(), 0
    for number, call in enumerate(calls, 1):
        size = sum(len(row) for row in call)
        if number in wanted:
            touched |= {d for d in owner_of[at : at + size] if d is not None}
        at += size
    return touched
