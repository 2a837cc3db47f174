"""How the training tests run train.py: as one plain process (WORLD_SIZE 1, no torchrun, the
quickest real run), or its train() in the test's own process (the imports paid once), with the
arguments the rendered job passes; what a run printed and saved, read back."""

from __future__ import annotations

import re
import sys
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
