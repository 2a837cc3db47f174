"""train.py when a loss, a gradient or the weights are not finite: the step is skipped and
prints no loss line, a few in a row stop the job with one line and only finite checkpoints,
and the operator's restart passes over the batches that stopped it, up to a limit."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest

from infra import validation
from manifests import job as job_manifest
from tests.conftest import CONTEXT
from tests.training.runs import document_corpus, document_tokens, documents_touched, losses_of, saved_tensors, train_in_process, train_module


def _watched_by_a_rule(line: str) -> list[str]:
    settings, _ = validation.load_settings(CONTEXT, "dev")
    return [r["name"] for r in job_manifest.log_rules(settings) if re.fullmatch(r["logPattern"], line)]


def _poison(patch, *, loss_at=(), grad_at=()):
    """next_token_loss, poisoned on the given steps of a run from step 1: a NaN loss, or a
    finite loss whose gradient is infinite (the slope of sqrt at 0)."""
    import itertools

    train = train_module()
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
        code, out = train_in_process(workdir, "--max-steps=6", *every_step)
    assert code == 0, out[-2000:]
    trained = losses_of(out)
    assert sorted(trained) == [1, 2, 4, 6]
    skipped = [l for l in out.splitlines() if " skipped: " in l]
    assert [l.split()[:2] for l in skipped] == [["step", "3"], ["step", "5"]]
    assert "loss=nan" in skipped[0] and re.search(r"loss=[0-9.]+ grad_norm=(inf|nan) ", skipped[1]), skipped
    assert not any(_watched_by_a_rule(l) for l in skipped)  # they feed no loss clock
    # No checkpoint in a run of non-finite steps (the weights may hold the update that caused it).
    assert sorted(p.name for p in ckpt.iterdir()) == [f"step_{s:08d}" for s in (1, 2, 4, 6)]
    saved = {step: saved_tensors(ckpt / f"step_{step:08d}", tmp_path) for step in (1, 2, 4, 6)}
    for step, tensors in saved.items():
        assert all(torch.isfinite(t).all() for t in tensors.values()), step
    # A skipped step moves neither the weights nor the optimizer's moments and step count.
    assert saved[4]["optim.lm_head.weight.step"].item() == 3  # steps 1, 2 and 4
    assert saved[6]["optim.lm_head.weight.step"].item() == 4  # and 6
    # A restart from the last checkpoint trains on, healthily.
    code, out = train_in_process(workdir, "--max-steps=10", "--log-interval=1", f"--checkpoint-dir={ckpt}")
    assert code == 0 and f"resumed from {ckpt / 'step_00000006'} at step=6" in out and " skipped: " not in out
    resumed = losses_of(out)
    assert sorted(resumed) == [7, 8, 9, 10] and all(math.isfinite(v) for v in resumed.values())
    assert max(resumed.values()) < min(trained[1], trained[2])  # still learning


def test_non_finite_steps_in_a_row_stop_the_job_with_one_line_and_finite_checkpoints(workdir, tmp_path):
    import torch

    ckpt = tmp_path / "ckpt"
    # An absurd learning rate: step 1 is finite, and its update leaves weights so large that
    # every later gradient is NaN.
    code, out = train_in_process(workdir, "--max-steps=20", "--lr=1e30", "--warmup-steps=0", "--log-interval=5",
                                  f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1", "--keep-checkpoints=20")
    assert code == 3, out[-2000:]
    lines = out.splitlines()
    assert any(l.startswith("step=1 loss=") for l in lines)  # printed at once, not at its window's end
    (stopped,) = [l for l in lines if l.startswith("training stopped")]
    limit = train_module().parse_args([]).max_nonfinite_steps
    # Step 1's update, which made the weights the later steps overflow from, is in the step-1
    # checkpoint already: the window is the non-finite steps' documents alone.
    assert re.fullmatch(re.escape(f"training stopped: {limit} steps in a row with a non-finite loss or gradient norm "
                                  f"(steps 2-{limit + 1}); last checkpoint step=1; the restart passes over the ") + r"\d+"
                        + re.escape(f" documents of steps 2-{limit + 1} on 1 rank (recorded in {ckpt / '_NONFINITE.json'})"), stopped)
    assert not _watched_by_a_rule(stopped)
    assert sorted(p.name for p in ckpt.iterdir()) == ["_NONFINITE.json", "step_00000001"]
    last = saved_tensors(ckpt / "step_00000001", tmp_path)
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
        code, out = train_in_process(workdir, "--max-steps=4", "--log-interval=1", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1")
    assert code == 3, out[-2000:]
    assert ("training stopped: non-finite weights or optimizer state after step=2, not saved; last checkpoint step=1; "
            "the restart passes over the ") in out and " documents of steps 2-2 on 1 rank" in out
    assert sorted(p.name for p in ckpt.iterdir()) == ["_NONFINITE.json", "step_00000001"]


def _poison_documents(patch, bad: set[int], seen: list | None = None):
    """next_token_loss, NaN wherever its batch holds a token of one of the `bad` documents
    (tests/training/runs.py document_corpus): a failure that comes with the data, as a restart
    from a checkpoint before it would meet it again. `seen` gets each call's chunks."""
    import torch

    train = train_module()
    real_logits, real_loss = train.logits_of, train.next_token_loss

    def logits_of(model, inputs, *args, **kwargs):
        logits_of.inputs = inputs
        return real_logits(model, inputs, *args, **kwargs)

    def poisoned(logits, targets):
        rows = torch.cat([logits_of.inputs[:, :1], targets], dim=1).tolist()
        if seen is not None:
            seen.append(rows)
        loss = real_loss(logits, targets)
        return loss * float("nan") if set(document_tokens(rows)) & bad else loss

    patch.setattr(train, "logits_of", logits_of)
    patch.setattr(train, "next_token_loss", poisoned)


def test_a_restart_after_a_non_finite_stop_passes_over_the_documents_that_stopped_it(tmp_path):
    # The HyperPodPyTorchJob's run policy restarts the pods on any failure (RunPolicy: jobMaxRetryCount,
    # restartPolicy; no rule by exit code in the official CRD models), and a resume is exact: without
    # a record the restart would train on the same documents and stop the same way until the retries
    # run out. With it, those documents, and those of the update before them, are left out and the
    # run goes on. (On another world size: test_resize.py.)
    files, _ = document_corpus(tmp_path)
    data = ("--tokenizer", str(tmp_path / "tok"), "--data-files", *files)
    ckpt = tmp_path / "ckpt"
    common = ("--max-steps=12", "--log-interval=1", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=3", "--keep-checkpoints=20", *data)
    clean: list = []
    with pytest.MonkeyPatch.context() as patch:
        _poison_documents(patch, set(), clean)
        code, out = train_in_process(tmp_path, "--max-steps=12", "--log-interval=1", *data)
    assert code == 0, out[-2000:]
    # The documents only steps 5-7 hold: poisoned, those three steps go non-finite, no other.
    inside = set(document_tokens([r for s in (5, 6, 7) for r in clean[s - 1]]))
    bad = inside - set(document_tokens([r for s in (4, 8) for r in clean[s - 1]]))
    with pytest.MonkeyPatch.context() as patch:
        _poison_documents(patch, bad)
        code, out = train_in_process(tmp_path, *common)
    assert code == 3 and "(steps 5-7); last checkpoint step=3; the restart passes over the " in out, out[-2000:]
    window = documents_touched(clean, {4, 5, 6, 7})  # step 4's update came before them, and is not saved
    seen: list = []
    with pytest.MonkeyPatch.context() as patch:  # the operator's restart: the same data, the same poison
        _poison_documents(patch, bad, seen)
        code, out = train_in_process(tmp_path, *common)
    assert code == 0, out[-2000:]
    lines = out.splitlines()
    assert f"resumed from {ckpt / 'step_00000003'} at step=3" in lines
    assert (f"passing over the {len(window)} documents of steps 4-7 (step 4's update, then the non-finite steps) on 1 rank: "
            "an earlier run stopped on non-finite values there; they are not trained on") in lines
    assert sorted(losses_of(out)) == list(range(4, 13)) and " skipped: " not in out
    assert not set(document_tokens([r for call in seen for r in call])) & window  # trained on none of them
    assert not any(_watched_by_a_rule(l) for l in lines if l.startswith(("passing over", "training stopped")))


def test_non_finite_values_that_come_back_past_the_limit_end_the_job_instead_of_a_retry(workdir, tmp_path, capsys):
    # A recipe that diverges, not a batch: an absurd learning rate. Each stop is recorded and passed
    # over once; past --max-nonfinite-restarts the run gives up at once with one line and exits 0, the
    # one exit the elastic agent does not restart (test_the_give_up_exit_is_the_one_the_agent_completes).
    ckpt = tmp_path / "ckpt"
    args = ("--max-steps=20", "--lr=1e30", "--warmup-steps=0", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=1",
            "--max-nonfinite-restarts=1")
    code, out = train_in_process(workdir, *args)
    assert code == 3 and "training gave up" not in out
    earlier = []
    for _ in range(2):  # the restart meets it again and gives up; so does any start after it
        code, out = train_in_process(workdir, *args)
        lines = out.splitlines()
        (line,) = [l for l in lines if l.startswith("training gave up")]
        assert code == 0 and line == lines[-1] and "(2 windows, at most 1)" in line and f"then delete {ckpt / '_NONFINITE.json'}" in line
        assert "Every rank exits 0, so the operator ends the job as Completed instead of restarting it" in line
        assert "retried up to runPolicy.jobMaxRetryCount" in line
        assert f"Kept in {ckpt / '_GAVE_UP.json'} (`hyperpod-cdk job-record` shows it)" in line
        earlier.append([l for l in lines if l.startswith("an earlier start gave up: ")])
    windows = json.loads((ckpt / "_NONFINITE.json").read_text())["windows"]
    assert [(w["steps"], w["update"], w["resume_from"]) for w in windows] == [([2, 4], None, 1)] * 2
    assert not _watched_by_a_rule(line)
    # Each give-up kept beside the checkpoints, past the job's log: what gave up, when, which windows.
    gave_up = json.loads((ckpt / "_GAVE_UP.json").read_text())["gave_up"]
    assert [(e["step"], e["world"], e["limit"], e["exit"], e["windows"]) for e in gave_up] == [(1, 1, 1, 0, windows)] * 2
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", e["at"]) for e in gave_up)
    # The second start said the first's give-up, once.
    listed = "; ".join(f"the {len(w['documents'])} documents of steps 2-4 on 1 rank" for w in windows)

    def said(event: dict) -> str:
        return (f"an earlier start gave up: at {event['at']}, last checkpoint step=1, on 1 rank, exit 0: 2 non-finite windows, "
                f"at most 1 ({listed}) (recorded in {ckpt / '_GAVE_UP.json'})")

    assert earlier == [[], [said(gave_up[0])]]
    # The checkpoints deleted to start over: the record is of them, and holds no fresh start.
    for step in ckpt.glob("step_*"):
        shutil.rmtree(step)
    code, out = train_in_process(workdir, "--max-steps=3", f"--checkpoint-dir={ckpt}", "--max-nonfinite-restarts=1")
    assert code == 0 and sorted(losses_of(out)) == [1, 2, 3], out[-2000:]
    assert (f"setting aside 2 non-finite window(s) recorded against checkpoints that are gone (the {len(windows[0]['documents'])} "
            "documents of steps 2-4 on 1 rank") in out
    assert json.loads((ckpt / "_NONFINITE.json").read_text())["windows"] == []
    # The fresh start says the last give-up, which no start had said; the record keeps both.
    assert [l for l in out.splitlines() if l.startswith("an earlier start gave up: ")] == [said(gave_up[1])]
    assert [e["at"] for e in json.loads((ckpt / "_GAVE_UP.json").read_text())["gave_up"]] == [e["at"] for e in gave_up]
    # The operator's command reads the same records, in the same words, after the job is gone.
    from cli import main as cli

    capsys.readouterr()
    assert cli.main(["job-record", "--checkpoint-dir", str(ckpt)]) == 1
    shown = capsys.readouterr().out.splitlines()
    assert [l.split("; printed by the start at ")[0] for l in shown[1:3]] == [said(e).replace("an earlier start gave up: ", "gave up ").rsplit(" (recorded in ", 1)[0]
                                                                          for e in gave_up]


def test_the_give_up_exit_is_the_one_the_agent_completes():
    # hyperpod-elastic-agent's own source (.venv/sdist, the image's pin): its process context counts
    # every non-zero exit as a ProcessFailure, which the agent reports as WorkerCrash for the operator
    # to restart; a worker group that succeeded moves the agent to COMPLETED. No exit code but 0 stops
    # the retries, and the CRD's RunPolicy (sagemaker-hyperpod's models) has no field by exit code.
    import ast
    import tarfile

    from tests.manifests.test_agent_contract import SDIST

    with tarfile.open(SDIST) as tar:
        source = {m.name.split("/src/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()
                  if "/src/hyperpod_elastic_agent/" in m.name and m.name.endswith(".py")}
    poll = ast.unparse(next(n for n in ast.walk(ast.parse(source["hyperpod_elastic_agent/pcontext/pcontext.py"]))
                            if isinstance(n, ast.FunctionDef) and n.name == "_poll"))
    assert "if exitcode != 0:" in poll and "ProcessFailure(" in poll
    run = ast.unparse(next(n for n in ast.walk(ast.parse(source["hyperpod_elastic_agent/elastic_agent/plr_hyperpod_elastic_agent.py"]))
                           if isinstance(n, ast.FunctionDef) and n.name == "_invoke_run"))
    succeeded = run[run.index("elif state == WorkerState.SUCCEEDED:"):run.index("elif state in {WorkerState.UNHEALTHY, WorkerState.FAILED}:")]
    assert "self.set_agent_state(AgentState.COMPLETED)" in succeeded
    assert "WorkerCrash" in source["hyperpod_elastic_agent/elastic_agent/hyperpod_elastic_agent.py"]
    import importlib.metadata
    import importlib.util

    from tests.manifests.test_job import MODEL_FILE
    from training import log_format

    assert log_format.GIVE_UP_EXIT == 0
    path = importlib.metadata.distribution("sagemaker-hyperpod").locate_file(MODEL_FILE)
    spec = importlib.util.spec_from_file_location("hyperpod_pytorch_job_unified_config", path)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    fields = set(models.RunPolicy.model_fields) | set(models.RestartPolicy.model_fields)
    assert "jobMaxRetryCount" in fields and not {f for f in fields if "exit" in f.lower()}, fields
    # What docs/sample-job.md says `hyp list hyp-pytorch-job` shows of it: the type of the job's last
    # condition whose status is True (the installed sagemaker-hyperpod CLI's list_jobs), so a give-up
    # reads as the completion a finished run has.
    cli_source = importlib.metadata.distribution("sagemaker-hyperpod").locate_file("sagemaker/hyperpod/cli/commands/training.py")
    listing = ast.unparse(next(n for n in ast.walk(ast.parse(cli_source.read_text())) if isinstance(n, ast.FunctionDef) and n.name == "list_jobs"))
    assert "for condition in reversed(job.status.conditions):" in listing and "status = condition.type" in listing
    assert "if condition.status == 'True':" in listing and "'STATUS'" in listing


def test_after_a_resume_whose_first_step_is_skipped_the_first_loss_line_comes_at_once(workdir, tmp_path):
    # The JobStart rule waits for a run's first loss line (manifests/job.py FIRST_LOSS_S): a skipped
    # first step must not hold it back to the end of its --log-interval window.
    import itertools

    ckpt = tmp_path / "ckpt"
    code, out = train_in_process(workdir, "--max-steps=4", f"--checkpoint-dir={ckpt}")
    assert code == 0, out[-2000:]
    train = train_module()
    real_loss, real_log, calls, printed = train.next_token_loss, train.log, itertools.count(1), []
    forwards = [0]

    def loss(logits, targets):
        forwards[0] = next(calls)
        value = real_loss(logits, targets)
        return value * float("nan") if forwards[0] == 1 else value

    def log(line, *, local_rank):
        printed.append((forwards[0], line))
        real_log(line, local_rank=local_rank)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "next_token_loss", loss)
        patch.setattr(train, "log", log)
        code, out = train_in_process(workdir, "--max-steps=12", "--log-interval=10", f"--checkpoint-dir={ckpt}")
    assert code == 0, out[-2000:]
    at = {line.split()[0]: forward for forward, line in printed if line.startswith("step")}
    assert at["step"] == 1 and at["step=6"] == 2  # step 5 skipped, step 6's line before step 7's forward
