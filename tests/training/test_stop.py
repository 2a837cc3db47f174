"""train.py and the HyperPod elastic agent's stop, held to the agent's own source (its sdist in
.venv/sdist): each signal it stops workers with saves at the next step and exits, a stop that
cannot save ends before the agent's SIGKILL, and an elastic scale event arrives as a signal
train.py saves on."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from infra import validation
from manifests import job as job_manifest
from tests.conftest import CONTEXT
from tests.training.runs import TRAIN, job_train_args, plain_command, single_env, train_module


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
    settings, _ = validation.load_settings(CONTEXT, "prod")
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
    train_module()  # its folder on the path
    import agent_stop

    shutdown = int(_agent_option("--shutdown-timeout"))
    # The agent's own default leaves a save no time; the job passes its own, to the agent
    # and to train.py alike.
    assert _agent_default("--shutdown-timeout") == 15 < shutdown
    job = job_train_args()
    assert job.stop_timeout == shutdown
    # The watchdog ends a stop that cannot save STOP_MARGIN_S before the agent's SIGKILL,
    # and the pod's grace period outlasts both.
    assert 0 < agent_stop.STOP_MARGIN_S and max(1.0, job.stop_timeout - agent_stop.STOP_MARGIN_S) < shutdown
    settings, _ = validation.load_settings(CONTEXT, "prod")
    pod = job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > shutdown


def test_each_signal_the_agent_stops_workers_with_saves_at_the_next_step_and_exits(workdir, ranks, tmp_path):
    signals = sorted(_agent_stop_signals())
    assert signals == ["SIGTERM", "SIGUSR1"]
    for name in signals:
        ckpt = tmp_path / name
        # SIGUSR1's run saves in the background at every step, as the job does at its
        # interval: the stop comes while a save is being written, and waits for it.
        saves = ["--async-checkpoint", "--checkpoint-interval=1"] if name == "SIGUSR1" else ["--checkpoint-interval=100000"]
        args = plain_command(workdir, "--synthetic-data", "--max-steps=100000", "--log-interval=1", f"--checkpoint-dir={ckpt}", *saves)[2:]
        run = ranks.start(1, TRAIN, args, cwd=workdir, env=single_env(), stream=True)
        try:
            sent = None
            for line in run.lines(timeout=60):
                if line.startswith("step=2 "):
                    sent = time.monotonic()
                    os.kill(run.ranks[0], getattr(signal, name))  # as the agent signals its worker
                    break
            done = run.wait(timeout=60)
        finally:
            run.kill()
        assert sent, f"{name}: the run ended before step 2 ({done.returncode})"
        exited = time.monotonic() - sent
        rest = done.stdout
        assert done.returncode == 128 + getattr(signal, name), rest[-2000:]
        (stopped,) = [l for l in rest.splitlines() if l.startswith("training stopped")]
        step = int(re.fullmatch(rf"training stopped on {name} after step=(\d+); checkpoint step=\1", stopped).group(1))
        assert (tmp_path / name / f"step_{step:08d}" / "_COMPLETE.json").exists()
        if name == "SIGUSR1":  # the save before the stop's completed too, before it
            lines = rest.splitlines()
            before = [l for l in lines[: lines.index(stopped)] if l.startswith(f"checkpoint saved step={step - 1} ")]
            assert before and (tmp_path / name / f"step_{step - 1:08d}" / "_COMPLETE.json").exists(), rest[-2000:]
        assert exited < 10, exited


def test_a_stop_with_a_peer_gone_exits_without_a_save_before_the_agents_sigkill(workdir, ranks, tmp_path):
    # Rank 1 freezes, as a hung node does, so rank 0's next collective never completes. Rank 0's
    # exit is its process gone; the launch's other rank is then killed here, not by an agent.
    stop_timeout = 7
    ckpt = tmp_path / "ckpt"
    args = plain_command(workdir, "--synthetic-data", "--max-steps=100000", "--log-interval=1", f"--checkpoint-dir={ckpt}",
                         "--checkpoint-interval=100000", f"--stop-timeout={stop_timeout}")[2:]
    run = ranks.start(2, TRAIN, args, cwd=workdir, env=single_env(), stream=True)
    try:
        assert any(line.startswith("step=2 ") for line in run.lines(timeout=60)), "rank 0 ended before step 2"
        os.kill(run.ranks[1], signal.SIGSTOP)
        sent = time.monotonic()
        os.kill(run.ranks[0], signal.SIGUSR1)
        said = []
        for line in run.lines(timeout=60):  # rank 1, stopped, holds the stream open: up to rank 0's last word
            said.append(line)
            if line.startswith("training stopped"):
                break
        while Path(f"/proc/{run.ranks[0]}").exists() and time.monotonic() - sent < 60:
            time.sleep(0.05)
        exited = time.monotonic() - sent
    finally:
        done = run.kill()
    rest = "".join(said) + done.stdout
    assert done.returncode == 128 + signal.SIGUSR1, rest[-2000:]  # rank 0's: the first rank to end
    (stopped,) = [l for l in rest.splitlines() if l.startswith("training stopped")]
    assert re.fullmatch(r"training stopped on SIGUSR1 without a checkpoint: no step boundary within \d+s of the signal "
                        r"\(a peer gone, or a collective hung\); last checkpoint step=0", stopped), stopped
    assert exited < stop_timeout  # before the agent's SIGKILL
    assert not ckpt.exists()


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
    assert registered <= {s.name for s in train_module().StopRequest.SIGNALS}
