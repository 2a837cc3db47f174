"""How the training tests run train.py: as one plain process (WORLD_SIZE 1, no torchrun, the
quickest real run), or its train() in the test's own process (the imports paid once), with the
arguments the rendered job passes; what a run printed and saved, read back."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
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
    """fork_ranks.py: each launch of train.py's ranks forked from one process that has made their
    imports once, for all the launches of a test module; one launch at a time."""

    def __init__(self, env: dict | None = None):
        """`env`: the server's environment, which its imports read (bench_train.offline_env by default)."""
        self._server = subprocess.Popen([sys.executable, str(FORK_RANKS)], env=env or bench_train.offline_env(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)

    def start(self, world: int, script: Path, args: list[str], *, cwd: Path, env: dict, stream: bool = False) -> "Launch":
        """`script` on `world` ranks in `cwd` with `env` (the ranks' whole environment), as torchrun
        would start it; with `stream`, its stdout is read as the ranks write it (Launch.lines)."""
        out = Path(tempfile.mkdtemp(prefix="ranks-"))
        if stream:
            os.mkfifo(out / "stdout")
        request = {"world": world, "script": str(script), "args": args, "cwd": str(cwd), "env": env,
                   "stdout": str(out / "stdout"), "stderr": str(out / "stderr")}
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        stdout = os.open(out / "stdout", os.O_RDONLY) if stream else None  # until the launch opens the FIFO's other end
        return Launch(self, [str(script), *args], self.answer(60)["ranks"], out, stdout)

    def run(self, world: int, script: Path, args: list[str], *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        """start(), then its exit status, stdout and stderr once its ranks have ended."""
        return self.start(world, script, args, cwd=cwd, env=env).wait(timeout)

    def answer(self, timeout: float) -> dict:
        """The server's next answer line; past `timeout` the server and its ranks are killed."""
        if not select.select([self._server.stdout], [], [], timeout)[0]:
            self.close()
            raise subprocess.TimeoutExpired(str(FORK_RANKS), timeout)
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"fork_ranks.py ended with {self._server.wait()}")
        return json.loads(line)

    def close(self) -> None:
        os.killpg(self._server.pid, signal.SIGKILL)  # the server, and any launch and rank still running
        self._server.wait()


class Launch:
    """A launch of RankServer.start: its ranks' process ids (to signal them as the agent does)
    and, streamed, their stdout line by line (lines())."""

    def __init__(self, server: RankServer, args: list[str], ranks: list[int], out: Path, stream: int | None):
        self.args, self.ranks = args, ranks
        self._server, self._out, self._stream, self._unread, self._ended = server, out, stream, b"", False

    def lines(self, timeout: float) -> Iterator[str]:
        """The streamed stdout's lines as the ranks write them, to its end."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._unread:
                line, self._unread = self._unread.split(b"\n", 1)
                yield line.decode() + "\n"
            chunk = self._read(deadline, timeout)
            if not chunk:
                return
            self._unread += chunk

    def _read(self, deadline: float, timeout: float) -> bytes:
        if not select.select([self._stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
            self._server.close()
            raise subprocess.TimeoutExpired(self.args, timeout)
        return os.read(self._stream, 65536)

    def wait(self, timeout: float) -> subprocess.CompletedProcess:
        """Its exit status (the first failed rank's), stdout (what lines() left unread of a stream)
        and stderr, once every rank has ended; past `timeout` the server and its ranks are killed."""
        deadline = time.monotonic() + timeout
        try:
            if self._stream is not None:  # to its end: every rank's exit and the launch's
                while chunk := self._read(deadline, timeout):
                    self._unread += chunk
            status = self._server.answer(max(0.0, deadline - time.monotonic()))["status"]
            stdout = (self._out / "stdout").read_text() if self._stream is None else self._unread.decode()
            return subprocess.CompletedProcess(self.args, status, stdout, (self._out / "stderr").read_text())
        finally:
            self._ended = True
            if self._stream is not None:
                os.close(self._stream)
            shutil.rmtree(self._out, ignore_errors=True)

    def kill(self) -> subprocess.CompletedProcess | None:
        """Its ranks killed and its end awaited (wait()'s), where it has not ended: the server's
        next launch can start."""
        if self._ended:
            return None
        for rank in self.ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank, signal.SIGKILL)
        return self.wait(30)


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
    import io

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
