"""train.py for real: 2 processes over gloo via torchrun (or one plain process), the tiny
preset, a local dataset and a tokenizer trained on the spot (nothing is downloaded)."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infra import config
from manifests import job as job_manifest
from tests.bench import bench_train
from tests.conftest import CONTEXT, ROOT

TRAIN = ROOT / "training" / "train.py"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("train")
    bench_train.prepare(work)
    return work


def _torchrun(work: Path, max_steps: int) -> subprocess.CompletedProcess:
    # In stream order (no shuffle buffer), so a resume must reproduce the losses exactly.
    extra = [f"--checkpoint-dir={work / 'ckpt'}", "--checkpoint-interval=10", "--keep-checkpoints=2", "--shuffle-buffer=0"]
    cmd = bench_train.train_command(TRAIN, work, max_steps=max_steps, extra=extra)
    result = subprocess.run(cmd, cwd=work, env=bench_train.offline_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _single(work: Path, *args: str) -> list[str]:
    """One plain process (WORLD_SIZE 1), no torchrun: the quickest real run."""
    return [
        sys.executable, str(TRAIN), "--model=tiny", f"--tokenizer={work / 'tok'}", f"--data-files={work / 'corpus.txt'}",
        "--seq-len=32", "--batch-size=4", "--lr=3e-3", "--warmup-steps=3", "--shuffle-buffer=0", *args,
    ]


@pytest.fixture(scope="module")
def first_run(workdir):
    return _torchrun(workdir, 30).stdout


def _losses(out: str) -> dict[int, float]:
    return {int(m[0]): float(m[1]) for m in re.findall(r"^step=(\d+) loss=(\S+) ", out, flags=re.M)}


def test_loss_is_logged_every_step_is_finite_and_falls(first_run):
    losses = _losses(first_run)
    assert sorted(losses) == list(range(1, 31))
    assert all(math.isfinite(v) for v in losses.values())
    first, last = [losses[s] for s in range(1, 6)], [losses[s] for s in range(26, 31)]
    assert sum(last) / 5 < 0.85 * sum(first) / 5


def test_every_loss_and_checkpoint_line_matches_the_rendered_log_rules(first_run):
    settings, _ = config.load_settings(CONTEXT, "dev")
    rules = {r["name"]: re.compile(r["logPattern"]) for r in job_manifest.build(settings, image="x")["spec"]["runPolicy"]["logMonitoringConfiguration"]}
    loss_lines = [l for l in first_run.splitlines() if l.startswith("step=")]
    ckpt_lines = [l for l in first_run.splitlines() if l.startswith("checkpoint saved")]
    assert len(loss_lines) == 30 and len(ckpt_lines) == 3
    for line in loss_lines:
        assert rules["JobStart"].fullmatch(line) and rules["JobHangingDetection"].fullmatch(line)
        assert not rules["CheckpointCadence"].fullmatch(line)
    for line in ckpt_lines:
        assert rules["CheckpointCadence"].fullmatch(line) and not rules["JobStart"].fullmatch(line)
    # the hang rule's capture group is the loss itself
    assert float(rules["JobHangingDetection"].fullmatch(loss_lines[-1]).group(1)) == _losses(first_run)[30]


def test_only_one_process_per_node_writes_the_watched_lines(first_run):
    assert len([l for l in first_run.splitlines() if l.startswith("step=1 ")]) == 1


def test_checkpoints_are_complete_listed_and_only_the_newest_are_kept(first_run, workdir):
    for step in (20, 30):
        manifest = json.loads((workdir / "ckpt" / f"step_{step:08d}" / "_COMPLETE.json").read_text())
        assert manifest["step"] == step and ".metadata" in manifest["files"]
        # each rank's stream position is part of the checkpoint
        assert {"data_rank00000.json", "data_rank00001.json"} <= set(manifest["files"])
    assert sorted(p.name for p in (workdir / "ckpt").iterdir()) == ["step_00000020", "step_00000030"]


def test_resume_skips_a_truncated_checkpoint_and_continues_at_the_right_step(first_run, workdir):
    latest = workdir / "ckpt" / "step_00000030"
    shard = sorted(latest.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])  # truncated, as by a node lost mid-upload
    partial = workdir / "ckpt" / "step_00000040"  # and one that never got its manifest
    partial.mkdir()
    (partial / ".metadata").write_bytes(b"partial")
    out = _torchrun(workdir, 30).stdout
    assert f"resumed from {workdir / 'ckpt' / 'step_00000020'} at step=20" in out
    assert "replaying" not in out  # the stream continued from its saved state
    resumed = _losses(out)
    assert sorted(resumed) == list(range(21, 31))
    # same weights, optimizer, schedule and data position: the same losses as the first run
    original = _losses(first_run)
    for step in range(21, 31):
        assert resumed[step] == pytest.approx(original[step], abs=2e-3)


def test_reports_tokens_per_second(first_run, record_property):
    tps = [float(x) for x in re.findall(r"tokens_per_s=(\S+)", first_run)]
    assert tps and min(tps) > 0
    record_property("tiny_cpu_tokens_per_s_median", sorted(tps)[len(tps) // 2])
    print(f"\ntiny preset, 2 gloo processes on CPU: median {sorted(tps)[len(tps) // 2]:.0f} tokens/s")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_env() -> dict:
    """A free rendezvous port for each single-process run."""
    # One compile thread: no pool of inductor worker processes for the test to wait on.
    return {**bench_train.offline_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "TORCHINDUCTOR_COMPILE_THREADS": "1"}


def _run_single(work: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_single(work, *args), cwd=work, env=_single_env(), capture_output=True, text=True, timeout=timeout)


def test_a_non_finite_loss_is_never_checkpointed_and_exits_non_zero(workdir):
    ckpt = workdir / "nan-ckpt"
    # An absurd learning rate: step 1's loss is finite (computed before any update); within a
    # few steps the weights overflow.
    result = _run_single(workdir, "--max-steps=20", "--lr=1e30", "--warmup-steps=0", "--log-interval=5",
                         f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1")
    assert result.returncode == 3, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    # step 1 is printed at once, not at the end of its log window
    assert any(l.startswith("step=1 loss=") for l in lines)
    (stopped,) = [l for l in lines if l.startswith("training stopped: non-finite loss")]
    bad, saved = map(int, re.fullmatch(r"training stopped: non-finite loss at step=(\d+); last checkpoint step=(\d+)", stopped).groups())
    assert bad >= 2 and saved == bad - 1
    # every step before the bad one was saved (interval 1), the bad one never
    assert sorted(p.name for p in ckpt.iterdir())[-1] == f"step_{saved:08d}"
    settings, _ = config.load_settings(CONTEXT, "dev")
    rules = {r["name"]: re.compile(r["logPattern"]) for r in job_manifest.log_rules(settings)}
    # the line stops the loss clocks instead of feeding them
    assert not rules["JobHangingDetection"].fullmatch(stopped) and not rules["JobStart"].fullmatch(stopped)


def test_sigterm_saves_a_checkpoint_and_exits(workdir):
    ckpt = workdir / "term-ckpt"
    proc = subprocess.Popen(
        _single(workdir, "--max-steps=100000", "--log-interval=2", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=100000"),
        cwd=workdir, env=_single_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith("step=3 "):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    lines += rest.splitlines()
    assert proc.returncode == 128 + signal.SIGTERM
    (stopped,) = [l for l in lines if l.startswith("training stopped on SIGTERM")]
    step = int(re.search(r"after step=(\d+)", stopped).group(1))
    assert (ckpt / f"step_{step:08d}" / "_COMPLETE.json").exists()


def test_stream_state_resumes_at_the_next_chunk(workdir):
    import argparse

    sys.path.insert(0, str(ROOT / "training"))
    import train
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(workdir / "tok")
    args = argparse.Namespace(data_files=[str(workdir / "corpus.txt")], shuffle_buffer=0, seed=1)

    def stream():
        return train.TokenStream(train.load_stream(args, 0, 1), tokenizer, 32, "text")

    first = stream()
    for _ in range(7):
        next(first)
    state = json.loads(json.dumps(first.state_dict()))  # as saved in the checkpoint
    resumed = stream()
    resumed.load_state_dict(state)
    assert [next(resumed) for _ in range(5)] == [next(first) for _ in range(5)]


PERFORMANCE_FLAGS = {
    "compile": ["--compile"],
    "selective-ac": ["--activation-checkpointing=selective"],
    "no-ac": ["--activation-checkpointing=none"],
    "fused-adamw": ["--fused-optimizer"],
    "fsdp-units": ["--fsdp-units=tuned"],
}


def _run_in_process(work: Path, *args: str) -> dict[int, float]:
    """train.py's train() in this process (one rank, gloo): the imports are paid once for
    all the option runs below. Returns the logged losses."""
    import contextlib
    import io
    import os

    sys.path.insert(0, str(ROOT / "training"))
    import train

    env = _single_env()
    saved_env = {k: os.environ.get(k) for k in env}
    saved_term = signal.getsignal(signal.SIGTERM)
    os.environ.update(env)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            assert train.train(train.parse_args(_single(work, *args)[2:])) == 0
    finally:
        signal.signal(signal.SIGTERM, saved_term)
        for k, v in saved_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return _losses(out.getvalue())


@pytest.fixture(scope="module")
def plain_losses(workdir):
    return _run_in_process(workdir, "--max-steps=4", "--log-interval=1")


@pytest.mark.parametrize("flag", sorted(PERFORMANCE_FLAGS))
def test_each_performance_option_runs_and_gives_the_plain_loss(workdir, plain_losses, flag):
    losses = _run_in_process(workdir, "--max-steps=4", "--log-interval=1", *PERFORMANCE_FLAGS[flag])
    assert sorted(losses) == [1, 2, 3, 4]
    for step, value in plain_losses.items():
        assert losses[step] == pytest.approx(value, abs=1e-3), step


def _choose_as_rank(rank: int, port: int, out: str):
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "training"))
    import train

    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    # Each rank lists a different newest checkpoint, as ranks listing an eventually
    # consistent store (or their own node's disk) during a save can.
    train.complete_checkpoints = lambda base: [(20 + 10 * rank, f"{base}/step_{20 + 10 * rank:08d}")]
    Path(out, f"rank{rank}.json").write_text(json.dumps(train.choose_checkpoint("s3://b/ckpt", rank)))
    dist.destroy_process_group()


def test_every_rank_resumes_from_the_checkpoint_rank_0_chose(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_choose_as_rank, args=(_free_port(), str(tmp_path)), nprocs=2)
    chosen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert chosen == [[20, "s3://b/ckpt/step_00000020"]] * 2
