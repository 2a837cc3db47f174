"""train.py for real: 2 processes over gloo via torchrun (or one plain process), the tiny
preset, a local dataset and a tokenizer trained on the spot (nothing is downloaded)."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra import config
from manifests import job as job_manifest
from tests.bench import bench_train
from tests.conftest import CONTEXT, ROOT
from tests.training import s3_stack

TRAIN = ROOT / "training" / "train.py"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("train")
    bench_train.prepare(work)
    return work


def _torchrun(work: Path, max_steps: int) -> subprocess.CompletedProcess:
    # The job's shuffle (its buffer and seed) and background saves: a resume must reproduce
    # the losses all the same.
    job = _job_train_args()
    extra = [f"--checkpoint-dir={work / 'ckpt'}", "--checkpoint-interval=10", "--keep-checkpoints=2",
             f"--shuffle-buffer={job.shuffle_buffer}", f"--seed={job.seed}", *(["--async-checkpoint"] if job.async_checkpoint else [])]
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
        assert manifest["world"] == manifest["recipe_world"] == 2  # what the learning rate is given for
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


def _train_in_process(work: Path, *args: str) -> tuple[int, str]:
    """train.py's train() in this process (one rank, gloo): the imports are paid once for all
    the runs that use it. Returns its exit code and what it printed."""
    import contextlib
    import io
    import os

    import datasets.config

    import torch

    env = _single_env()
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
            train = _train_module()
            code = train.train(train.parse_args(_single(work, *args)[2:]))
    finally:
        torch.set_num_threads(threads)
        for k, v in saved_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return code, out.getvalue()


def _train_module():
    if str(ROOT / "training") not in sys.path:
        sys.path.insert(0, str(ROOT / "training"))
    import train

    return train


def _saved_tensors(ckpt: Path, scratch: Path) -> dict[str, "torch.Tensor"]:
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


def _watched_by_a_rule(line: str) -> list[str]:
    settings, _ = config.load_settings(CONTEXT, "dev")
    return [r["name"] for r in job_manifest.log_rules(settings) if re.fullmatch(r["logPattern"], line)]


def _poison(patch, *, loss_at=(), grad_at=()):
    """next_token_loss, poisoned on the given steps of a run from step 1: a NaN loss, or a
    finite loss whose gradient is infinite (the slope of sqrt at 0)."""
    import itertools

    train = _train_module()
    real, steps = train.next_token_loss, itertools.count(1)

    def poisoned(logits, targets):
        loss, step = real(logits, targets), next(steps)
        if step in loss_at:
            return loss * float("nan")
        if step in grad_at:
            total = logits.float().sum()
            return loss + (total - total.detach()).sqrt()
        return loss

    patch.setattr(train, "next_token_loss", poisoned)


def test_a_step_with_a_non_finite_loss_or_gradient_is_skipped_and_nothing_non_finite_is_saved(workdir, tmp_path):
    import torch

    ckpt = tmp_path / "ckpt"
    every_step = ("--log-interval=1", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1", "--keep-checkpoints=20")
    with pytest.MonkeyPatch.context() as patch:
        _poison(patch, loss_at={3}, grad_at={5})
        code, out = _train_in_process(workdir, "--max-steps=6", *every_step)
    assert code == 0, out[-2000:]
    trained = _losses(out)
    assert sorted(trained) == [1, 2, 4, 6]
    skipped = [l for l in out.splitlines() if " skipped: " in l]
    assert [l.split()[:2] for l in skipped] == [["step", "3"], ["step", "5"]]
    assert "loss=nan" in skipped[0] and re.search(r"loss=[0-9.]+ grad_norm=(inf|nan) ", skipped[1]), skipped
    assert not any(_watched_by_a_rule(l) for l in skipped)  # they feed no loss clock
    saved = {step: _saved_tensors(ckpt / f"step_{step:08d}", tmp_path) for step in range(1, 7)}
    for step, tensors in saved.items():
        assert all(torch.isfinite(t).all() for t in tensors.values()), step
    # A skipped step moves neither the weights nor the optimizer's moments and step count.
    for before, after in ((2, 3), (4, 5)):
        assert all(torch.equal(saved[before][k], saved[after][k]) for k in saved[before]), after
    assert not torch.equal(saved[3]["model.lm_head.weight"], saved[4]["model.lm_head.weight"])
    assert saved[6]["optim.lm_head.weight.step"].item() == 4  # steps 1, 2, 4 and 6
    # A restart from the last checkpoint trains on, healthily.
    code, out = _train_in_process(workdir, "--max-steps=10", "--log-interval=1", f"--checkpoint-dir={ckpt}")
    assert code == 0 and f"resumed from {ckpt / 'step_00000006'} at step=6" in out and " skipped: " not in out
    resumed = _losses(out)
    assert sorted(resumed) == [7, 8, 9, 10] and all(math.isfinite(v) for v in resumed.values())
    assert max(resumed.values()) < min(trained[1], trained[2])  # still learning


def test_non_finite_steps_in_a_row_stop_the_job_with_one_line_and_finite_checkpoints(workdir, tmp_path):
    import torch

    ckpt = tmp_path / "ckpt"
    # An absurd learning rate: step 1 is finite, and its update leaves weights so large that
    # every later gradient is NaN.
    code, out = _train_in_process(workdir, "--max-steps=20", "--lr=1e30", "--warmup-steps=0", "--log-interval=5",
                                  f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1", "--keep-checkpoints=20")
    assert code == 3, out[-2000:]
    lines = out.splitlines()
    assert any(l.startswith("step=1 loss=") for l in lines)  # printed at once, not at its window's end
    (stopped,) = [l for l in lines if l.startswith("training stopped")]
    limit = _train_module().parse_args([]).max_nonfinite_steps
    assert stopped == (f"training stopped: {limit} steps in a row with a non-finite loss or gradient norm "
                       f"(steps 2-{limit + 1}); last checkpoint step={limit}; the restart passes over steps 2-{limit + 1} "
                       f"(recorded in {ckpt / '_NONFINITE.json'})")
    assert not _watched_by_a_rule(stopped)
    assert sorted(p.name for p in ckpt.iterdir()) == ["_NONFINITE.json"] + [f"step_{s:08d}" for s in range(1, limit + 1)]
    last = _saved_tensors(ckpt / f"step_{limit:08d}", tmp_path)
    assert all(torch.isfinite(t).all() for t in last.values())


def test_weights_that_overflowed_in_a_finite_step_are_never_saved(workdir, tmp_path):
    import itertools

    import torch

    ckpt = tmp_path / "ckpt"
    real_step, steps = torch.optim.AdamW.step, itertools.count(1)

    def overflowing(self, *args, **kwargs):
        result = real_step(self, *args, **kwargs)
        if next(steps) == 2:  # as an absurd learning rate or a bf16 overflow can
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("inf"))
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim.AdamW, "step", overflowing)
        code, out = _train_in_process(workdir, "--max-steps=4", "--log-interval=1", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1")
    assert code == 3, out[-2000:]
    assert ("training stopped: non-finite weights or optimizer state after step=2, not saved; last checkpoint step=1; "
            "the restart passes over steps 2-2") in out
    assert sorted(p.name for p in ckpt.iterdir()) == ["_NONFINITE.json", "step_00000001"]


def _poison_batches(patch, bad: set[bytes], seen: dict[int, bytes] | None = None):
    """next_token_loss, NaN wherever its targets are one of the `bad` batches: a failure that
    comes with the data, as a restart from a checkpoint before it would meet it again. `seen`
    gets each call's batch by the run's step (from 1)."""
    import itertools

    train = _train_module()
    real, steps = train.next_token_loss, itertools.count(1)

    def poisoned(logits, targets):
        batch = targets.numpy().tobytes()
        if seen is not None:
            seen[next(steps)] = batch
        loss = real(logits, targets)
        return loss * float("nan") if batch in bad else loss

    patch.setattr(train, "next_token_loss", poisoned)


def test_a_restart_after_a_non_finite_stop_passes_over_the_batches_that_stopped_it(workdir, tmp_path):
    # The HyperPodPyTorchJob's run policy restarts the pods on any failure (RunPolicy: jobMaxRetryCount,
    # restartPolicy; no rule by exit code in the official CRD models), and a resume is exact: without
    # a record the restart would train on the same batches and stop the same way until the retries
    # run out. With it, those steps' batches are taken and left and the run goes on.
    ckpt = tmp_path / "ckpt"
    common = ("--log-interval=1", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=4", "--keep-checkpoints=20")
    batches: dict[int, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:
        _poison_batches(patch, set(), batches)
        code, clean = _train_in_process(workdir, "--max-steps=12", "--log-interval=1")
    assert code == 0, clean[-2000:]
    bad = {batches[s] for s in (5, 6, 7)}
    with pytest.MonkeyPatch.context() as patch:
        _poison_batches(patch, bad)
        code, out = _train_in_process(workdir, "--max-steps=12", *common)
    assert code == 3 and "the restart passes over steps 5-7" in out, out[-2000:]
    seen: dict[int, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:  # the operator's restart: the same data, the same poison
        _poison_batches(patch, bad, seen)
        code, out = _train_in_process(workdir, "--max-steps=12", *common)
    assert code == 0, out[-2000:]
    lines = out.splitlines()
    assert f"resumed from {ckpt / 'step_00000004'} at step=4" in lines
    assert ("passing over steps 5-7: an earlier run stopped on non-finite values there; their batches are not trained on") in lines
    assert sorted(_losses(out)) == [8, 9, 10, 11, 12] and " skipped: " not in out
    assert not set(seen.values()) & bad  # trained on none of them
    # The steps after the window train on the batches a clean run trains on there: the data moved past it.
    assert list(seen.values()) == [batches[s] for s in range(8, 13)]
    assert not any(_watched_by_a_rule(l) for l in lines if l.startswith(("passing over", "training stopped")))


def test_non_finite_values_that_come_back_past_the_limit_end_every_start_with_one_line(workdir, tmp_path):
    # A recipe that diverges, not a batch: an absurd learning rate. Each stop is recorded and passed
    # over once; past --max-nonfinite-restarts a start ends at once (exit 4), saying what to do.
    ckpt = tmp_path / "ckpt"
    args = ("--max-steps=20", "--lr=1e30", "--warmup-steps=0", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1",
            "--max-nonfinite-restarts=1")
    codes = [_train_in_process(workdir, *args)[0] for _ in range(2)]
    assert codes == [3, 3]
    code, out = _train_in_process(workdir, *args)
    (line,) = [l for l in out.splitlines() if l.startswith("training will not resume")]
    assert code == 4 and "(2 windows, at most 1)" in line and f"then delete {ckpt / '_NONFINITE.json'}" in line
    assert json.loads((ckpt / "_NONFINITE.json").read_text())["windows"] == [[2, 4], [5, 7]]
    assert not _watched_by_a_rule(line)


def _agent_stop_signals() -> set[str]:
    """The signals hyperpodrun stops workers with, read from its source: SIGUSR1 when the
    operator's /stop is graceful (PLRHyperPodElasticAgent._stop_workers), else its
    --shutdown-signal, which the job sets."""
    import ast
    import tarfile

    from tests.manifests.test_agent_contract import SDIST

    with tarfile.open(SDIST) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("elastic_agent/plr_hyperpod_elastic_agent.py"))
        tree = ast.parse(tar.extractfile(member).read())
    stop_workers = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_stop_workers")
    graceful = {n.attr for n in ast.walk(stop_workers) if isinstance(n, ast.Attribute) and n.attr.startswith("SIG")}
    return graceful | {_agent_option("--shutdown-signal")}


def _agent_option(option: str) -> str:
    settings, _ = config.load_settings(CONTEXT, "prod")
    command = job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    return next(a.split("=", 1)[1] for a in command if a.startswith(f"{option}="))


def _agent_default(option: str):
    """The default of one of hyperpodrun's own options, read from its source (run.py)."""
    import ast
    import tarfile

    from tests.manifests.test_agent_contract import SDIST

    with tarfile.open(SDIST) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("src/hyperpod_elastic_agent/run.py"))
        tree = ast.parse(tar.extractfile(member).read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument"
                and n.args and getattr(n.args[0], "value", None) == option)
    return next(ast.literal_eval(k.value) for k in call.keywords if k.arg == "default")


def test_the_stop_watchdog_ends_a_stop_before_the_agents_sigkill():
    _train_module()  # its folder on the path
    import agent_stop

    shutdown = int(_agent_option("--shutdown-timeout"))
    # The agent's own default leaves a save no time; the job passes its own, to the agent
    # and to train.py alike.
    assert _agent_default("--shutdown-timeout") == 15 < shutdown
    job = _job_train_args()
    assert job.stop_timeout == shutdown
    # The watchdog ends a stop that cannot save STOP_MARGIN_S before the agent's SIGKILL,
    # and the pod's grace period outlasts both.
    assert 0 < agent_stop.STOP_MARGIN_S and max(1.0, job.stop_timeout - agent_stop.STOP_MARGIN_S) < shutdown
    settings, _ = config.load_settings(CONTEXT, "prod")
    pod = job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > shutdown


def test_each_signal_the_agent_stops_workers_with_saves_at_the_next_step_and_exits(workdir, tmp_path):
    signals = sorted(_agent_stop_signals())
    assert signals == ["SIGTERM", "SIGUSR1"]
    runs = {}
    try:
        for name in signals:  # both at once: the startups overlap
            ckpt = tmp_path / name
            # SIGUSR1's run saves in the background at every step, as the job does at its
            # interval: the stop comes while a save is being written, and waits for it.
            saves = ["--async-checkpoint", "--checkpoint-interval=1"] if name == "SIGUSR1" else ["--checkpoint-interval=100000"]
            cmd = _single(workdir, "--synthetic-data", "--max-steps=100000", "--log-interval=1", f"--checkpoint-dir={ckpt}", *saves)
            runs[name] = subprocess.Popen(cmd, cwd=workdir, env=_single_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for name, proc in runs.items():
            sent = None
            for line in proc.stdout:
                if line.startswith("step=2 "):
                    sent = time.monotonic()
                    proc.send_signal(getattr(signal, name))
                    break
            rest, _ = proc.communicate(timeout=60)
            assert sent, f"{name}: the run ended before step 2 ({proc.returncode})"
            exited = time.monotonic() - sent
            assert proc.returncode == 128 + getattr(signal, name), rest[-2000:]
            (stopped,) = [l for l in rest.splitlines() if l.startswith("training stopped")]
            step = int(re.fullmatch(rf"training stopped on {name} after step=(\d+); checkpoint step=\1", stopped).group(1))
            assert (tmp_path / name / f"step_{step:08d}" / "_COMPLETE.json").exists()
            if name == "SIGUSR1":  # the save before the stop's completed too, before it
                lines = rest.splitlines()
                before = [l for l in lines[: lines.index(stopped)] if l.startswith(f"checkpoint saved step={step - 1} ")]
                assert before and (tmp_path / name / f"step_{step - 1:08d}" / "_COMPLETE.json").exists(), rest[-2000:]
            assert exited < 10, exited
    finally:
        for proc in runs.values():
            proc.kill()


def test_a_stop_with_a_peer_gone_exits_without_a_save_before_the_agents_sigkill(workdir, tmp_path):
    # Two ranks as two plain processes (no torchrun, whose agent would end the job itself).
    # Rank 1 freezes, as a hung node does, so rank 0's next collective never completes.
    stop_timeout = 7
    ckpt = tmp_path / "ckpt"
    env = {**_single_env(), "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    cmd = _single(workdir, "--synthetic-data", "--max-steps=100000", "--log-interval=1", f"--checkpoint-dir={ckpt}",
                  "--checkpoint-interval=100000", f"--stop-timeout={stop_timeout}")
    ranks = [subprocess.Popen(cmd, cwd=workdir, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, text=True) for r in (0, 1)]
    try:
        assert any(line.startswith("step=2 ") for line in ranks[0].stdout), "rank 0 ended before step 2"
        ranks[1].send_signal(signal.SIGSTOP)
        sent = time.monotonic()
        ranks[0].send_signal(signal.SIGUSR1)
        rest, _ = ranks[0].communicate(timeout=60)
        exited = time.monotonic() - sent
    finally:
        for proc in ranks:
            proc.kill()
    assert ranks[0].returncode == 128 + signal.SIGUSR1
    (stopped,) = [l for l in rest.splitlines() if l.startswith("training stopped")]
    assert re.fullmatch(r"training stopped on SIGUSR1 without a checkpoint: no step boundary within \d+s of the signal "
                        r"\(a peer gone, or a collective hung\); last checkpoint step=0", stopped), stopped
    assert exited < stop_timeout  # before the agent's SIGKILL
    assert not ckpt.exists()


def test_stream_state_resumes_at_the_next_chunk(workdir):
    import argparse

    sys.path.insert(0, str(ROOT / "training"))
    import train
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(workdir / "tok")
    args = argparse.Namespace(data_files=[str(workdir / "corpus.txt")], shuffle_buffer=0, seed=1, text_field="text")

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


def test_gpu_smoke_runs_the_8b_fast_path_with_options_train_py_defines_and_the_cpu_tests_run():
    """make gpu-smoke runs only where a GPU is lent: its train.py command must still parse,
    give the 8B shape's fast path, and use only performance options this module runs."""
    from tests.bench import gpu_smoke

    cmd = gpu_smoke.train_command(layers=4, steps=40)
    args = _train_module().parse_args(cmd[cmd.index(str(TRAIN)) + 1 :])  # exits on an option train.py lacks
    assert (args.model, args.layers, args.seq_len, args.batch_size, args.synthetic_data, args.bf16) == ("llama3.1-8b", 4, 8192, 1, True, "on")
    assert args.checkpoint_dir is None  # it measures training, not saves (tests/bench/bench_checkpoint.py does)
    assert args.compile and args.fused_optimizer and (args.fsdp_units, args.activation_checkpointing) == ("tuned", "selective")
    tested = {flag for flags in PERFORMANCE_FLAGS.values() for flag in flags}
    assert {a for a in cmd if a.split("=")[0] in {t.split("=")[0] for t in tested}} <= tested


def _run_in_process(work: Path, *args: str) -> dict[int, float]:
    code, out = _train_in_process(work, *args)
    assert code == 0, out[-2000:]
    return _losses(out)


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
    import checkpoints

    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    # Each rank lists a different newest checkpoint, as ranks listing an eventually
    # consistent store (or their own node's disk) during a save can.
    checkpoints.complete_checkpoints = lambda base: [(20 + 10 * rank, f"{base}/step_{20 + 10 * rank:08d}")]
    Path(out, f"rank{rank}.json").write_text(json.dumps(checkpoints.choose_checkpoint("s3://b/ckpt", rank)))
    dist.destroy_process_group()


def test_every_rank_resumes_from_the_checkpoint_rank_0_chose(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_choose_as_rank, args=(_free_port(), str(tmp_path)), nprocs=2)
    chosen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert chosen == [[20, "s3://b/ckpt/step_00000020"]] * 2


def _job_train_args() -> "argparse.Namespace":
    """train.py's arguments as the rendered job passes them (its defaults where the job is silent)."""
    settings, _ = config.load_settings(CONTEXT, "prod")
    command = job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    return _train_module().parse_args(command[command.index("/workspace/train.py") + 1 :])


def _dies_at(train, step: int):
    """train.py's next_token_loss, raising at `step` of the run: a lost node, mid-way."""
    import itertools

    real, steps = train.next_token_loss, itertools.count(1)

    def dies(logits, targets):
        if next(steps) == step:
            raise RuntimeError("node lost")
        return real(logits, targets)

    return dies


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on a free local port (moto's ThreadedMotoServer, in this process),
    and the environment that sends a training process's S3 calls to it with the training
    image's S3 stack (.venv-s3, as training/requirements.txt locks it) first on its path."""
    import logging
    import os

    from moto.server import ThreadedMotoServer

    assert (s3_stack.TARGET / ".installed").exists(), f"{s3_stack.TARGET} is missing: make install builds it"
    quiet = logging.getLogger("werkzeug")  # a line per request otherwise
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env = {k: v for k, v in _single_env().items() if not k.startswith("AWS_")}
    env.update(credentials, AWS_ENDPOINT_URL_S3=endpoint, AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true", NO_PROXY=host, no_proxy=host, PYTHONPATH=os.pathsep.join([str(s3_stack.TARGET), str(ROOT / "training")]))
    try:
        yield endpoint, env
    finally:
        server.stop()
        quiet.setLevel(level)


def _s3_client(endpoint: str):
    import boto3  # the project's, in this process: only to set up and read back the bucket

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


def _train_on_s3(work: Path, env: dict, *args: str, dies_at: int | None = None) -> tuple[int, str]:
    """train.py in its own process with the image's S3 stack (s3_server's env), on one rank;
    with `dies_at`, its next_token_loss raises at that step, as _dies_at does in process."""
    import inspect

    code = "import sys, train\n"
    if dies_at:
        code += inspect.getsource(_dies_at) + f"train.next_token_loss = _dies_at(train, {dies_at})\n"
    code += "sys.exit(train.train(train.parse_args(sys.argv[1:])))\n"
    cmd = [sys.executable, "-c", code, *_single(work, *args)[2:]]
    env = {**env, "MASTER_PORT": str(_free_port())}
    result = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    return result.returncode, result.stdout + (result.stderr[-4000:] if result.returncode else "")


def test_the_s3_checkpoint_test_runs_the_images_s3_stack_beside_the_tests_torch(workdir, s3_server):
    """In the process s3_server's env starts: every package of the image's S3 stack at the
    version training/requirements.txt locks, s3fs, aiobotocore, botocore and fsspec from
    .venv-s3, and the project's torch."""
    _, env = s3_server
    locked = {name: version for name, (version, _) in s3_stack.closure(s3_stack.LOCK.read_text()).items()}
    probe = ("import importlib, importlib.metadata as m, json, sys, torch\n"
             "print(json.dumps({'versions': {n: m.version(n) for n in sys.argv[1:]}, 'torch': torch.__file__,\n"
             "  'files': {n: importlib.import_module(n).__file__ for n in ('s3fs', 'aiobotocore', 'botocore', 'fsspec')}}))")
    result = subprocess.run([sys.executable, "-c", probe, *locked], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout)
    assert found["versions"] == locked and {"s3fs", "aiobotocore", "botocore", "fsspec"} <= set(locked)
    for name, path in found["files"].items():
        assert Path(path).is_relative_to(s3_stack.TARGET), (name, path)
    import torch

    assert found["torch"] == torch.__file__


@pytest.mark.parametrize("data", ["documents", "synthetic", "documents, saved in the background", "documents, saved to S3"])
def test_a_run_that_dies_mid_way_resumes_exactly_with_the_jobs_shuffle(workdir, tmp_path, data, request):
    """An uninterrupted run, and one that dies at step 21 (an exception, as a lost node) and
    resumes from its step-16 checkpoint, with the job's shuffle buffer and seed over four
    shards of 50 documents: the buffer holds every document, and the second pass starts
    after the resume. Every loss and every weight and optimizer tensor must be equal. Saved
    in the background (--async-checkpoint), the interrupted run's checkpoints must hold the
    very state of their step, though training went on while they were written. Saved to S3,
    the interrupted run and its resume run in their own processes with the training image's
    S3 stack against a moto server, and their checkpoints must be in the bucket."""
    import torch
    import torch.distributed as dist

    job = _job_train_args()
    assert job.shuffle_buffer > 200  # the job shuffles; here its buffer holds the whole pass
    lines = (workdir / "corpus.txt").read_text().splitlines()[:200]
    shards = []
    for i in range(4):
        shards.append(tmp_path / f"part-{i}.txt")
        shards[-1].write_text("\n".join(lines[i::4]) + "\n")
    source = ["--synthetic-data"] if data == "synthetic" else ["--data-files", *map(str, shards)]
    common = ("--max-steps=28", "--log-interval=1", "--checkpoint-interval=8", f"--shuffle-buffer={job.shuffle_buffer}",
              f"--seed={job.seed}", *source)
    code, whole = _train_in_process(workdir, *common, f"--checkpoint-dir={tmp_path / 'whole'}")
    assert code == 0, whole[-2000:]
    if "background" in data:
        common += ("--async-checkpoint",)

    if "S3" in data:
        endpoint, env = request.getfixturevalue("s3_server")
        bucket = _s3_client(endpoint)
        bucket.create_bucket(Bucket="checkpoints")
        killed = "s3://checkpoints/killed"
        code, out = _train_on_s3(workdir, env, *common, f"--checkpoint-dir={killed}", dies_at=21)
        assert code != 0 and "RuntimeError: node lost" in out and "checkpoint saved step=16 path=s3://" in out, out[-2000:]
        code, resumed = _train_on_s3(workdir, env, *common, f"--checkpoint-dir={killed}")
        # Every checkpoint went to the bucket, and none to a local folder named after the URL.
        keys = [o["Key"] for o in bucket.list_objects_v2(Bucket="checkpoints").get("Contents", [])]
        for key in keys:  # read back below as the local runs' folders are
            (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
            bucket.download_file("checkpoints", key, str(tmp_path / key))
        steps = sorted({key.split("/")[1] for key in keys})
        assert steps == ["step_00000016", "step_00000024", "step_00000028"] and not (workdir / "s3:").exists(), keys
        for step in steps:
            assert {".metadata", "_COMPLETE.json", "data_rank00000.json"} <= {k.rsplit("/", 1)[1] for k in keys if f"/{step}/" in k}
    else:
        killed = tmp_path / "killed"
        train = _train_module()
        with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError, match="node lost"):
            patch.setattr(train, "next_token_loss", _dies_at(train, 21))
            _train_in_process(workdir, *common, f"--checkpoint-dir={killed}")
        dist.destroy_process_group()
        code, resumed = _train_in_process(workdir, *common, f"--checkpoint-dir={killed}")
    assert code == 0 and f"resumed from {killed}/step_00000016 at step=16" in resumed, resumed[-2000:]
    assert "replaying" not in resumed
    if data.startswith("documents"):  # the resumed part runs into the second pass
        state = json.loads((tmp_path / "killed" / "step_00000028" / "data_rank00000.json").read_text())
        assert state["epoch"] == 1 and json.loads((tmp_path / "killed" / "step_00000016" / "data_rank00000.json").read_text())["epoch"] == 0
    expected, got = _losses(whole), _losses(resumed)
    assert sorted(got) == list(range(17, 29))
    assert {s: got[s] for s in got} == {s: expected[s] for s in got}
    a = _saved_tensors(tmp_path / "whole" / "step_00000028", tmp_path)
    b = _saved_tensors(tmp_path / "killed" / "step_00000028", tmp_path / "killed")
    assert sorted(a) == sorted(b) and len(a) > 40
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    if "background" in data:
        saved_lines = [l for l in resumed.splitlines() if l.startswith("checkpoint saved")]
        assert [int(re.search(r"step=(\d+)", l).group(1)) for l in saved_lines] == [24, 28]
        c = _saved_tensors(tmp_path / "whole" / "step_00000024", tmp_path / "whole")
        d = _saved_tensors(tmp_path / "killed" / "step_00000024", tmp_path / "killed")
        assert [k for k in c if not torch.equal(c[k], d[k])] == []  # written while steps 25-27 trained


def test_a_two_rank_checkpoint_resumes_on_one_rank_and_other_files_are_refused_with_one_line(first_run, workdir, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(workdir / "ckpt" / "step_00000020", ckpt / "step_00000020")  # two ranks' shards and positions
    code, out = _train_in_process(workdir, "--max-steps=24", "--log-interval=1", f"--checkpoint-dir={ckpt}",
                                  f"--shuffle-buffer={_job_train_args().shuffle_buffer}")
    assert code == 0, out[-2000:]
    assert "data position of 2 ranks re-divided over 1" in out and f"resumed from {ckpt / 'step_00000020'} at step=20" in out
    assert sorted(_losses(out)) == [21, 22, 23, 24] and all(math.isfinite(v) for v in _losses(out).values())
    # Half the world trains on half the global batch: the learning rate follows it (the linear
    # scaling rule), on the same schedule; the recipe's world goes on with the checkpoints.
    train = _train_module()
    args = train.parse_args(_single(workdir, "--max-steps=24")[2:])
    assert ("world 2 -> 1: global batch 8 -> 4 sequences, learning rate x0.5 with it (peak 3.000e-03 -> 1.500e-03; "
            "the linear scaling rule)") in out.splitlines()
    lrs = {int(m[0]): float(m[1]) for m in re.findall(r"^step=(\d+) loss=\S+ lr=(\S+) ", out, flags=re.M)}
    for step, lr in lrs.items():
        assert lr == pytest.approx(args.lr * 0.5 * train.lr_schedule(args)(step - 1), rel=1e-3), step
    manifest = json.loads((ckpt / "step_00000024" / "_COMPLETE.json").read_text())
    assert (manifest["world"], manifest["recipe_world"]) == (1, 2)
    other = tmp_path / "other.txt"
    other.write_text((workdir / "corpus.txt").read_text())
    code, out = _train_in_process(workdir, "--max-steps=30", f"--checkpoint-dir={ckpt}", "--data-files", str(workdir / "corpus.txt"), str(other))
    assert code == 2
    (refused,) = [l for l in out.splitlines() if l.startswith("cannot resume")]
    assert refused == (f"cannot resume from {ckpt / 'step_00000024'}: the checkpoint's data position is over 1 shards and this "
                       "dataset has 2: a pass over other files cannot be continued")


def test_an_elastic_scale_event_reaches_train_py_as_a_signal_it_saves_on():
    """The agent's elastic event handler (for training processes) takes elastic scaling events
    as the signals it registers a handler for, read from its source: train.py's stop must
    catch them, so a scale-down or scale-up saves before the world changes."""
    import ast
    import tarfile

    from tests.manifests.test_agent_contract import SDIST

    with tarfile.open(SDIST) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("src/hyperpod_elastic_agent/elastic_event_handler.py"))
        tree = ast.parse(tar.extractfile(member).read())
    registered = {call.args[0].attr for call in ast.walk(tree) if isinstance(call, ast.Call)
                  and getattr(call.func, "attr", None) == "signal" and call.args and isinstance(call.args[0], ast.Attribute)}
    assert registered == {"SIGUSR1"}
    assert registered <= {s.name for s in _train_module().StopRequest.SIGNALS}


def test_the_8b_job_trains_on_torchtitans_llama3_8b_recipe():
    # torchtitan's Llama 3 8B preset (tests/fixtures/torchtitan_llama3_8b.json, with its source):
    # the prod job's 1,000 steps warm up over its 200, at its learning rate, batch, sequence and
    # gradient clipping, as train.py reads the rendered command.
    recipe = json.loads((ROOT / "tests" / "fixtures" / "torchtitan_llama3_8b.json").read_text())
    args = _job_train_args()
    assert args.model == "llama3.1-8b" and args.max_steps == recipe["training"]["steps"]
    assert args.warmup_steps == recipe["lr_scheduler"]["warmup_steps"]
    assert args.lr == recipe["optimizer"]["lr"] and args.grad_clip == recipe["training"]["max_norm"]
    assert (args.batch_size, args.seq_len) == (recipe["training"]["batch_size"], recipe["training"]["seq_len"])
    # Another step count keeps torchtitan's share; the learning rate peaks at the warm-up's end.
    from training import model_shape

    assert model_shape.job_warmup_steps("llama3.1-8b", 3000) == 600
    factor = _train_module().lr_schedule(args)
    assert factor(args.warmup_steps - 1) == 1.0 and factor(0) == 1 / args.warmup_steps
