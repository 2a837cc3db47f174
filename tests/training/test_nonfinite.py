"""train.py when a loss, a gradient or the weights are not finite: the step is skipped and
prints no loss line, a few in a row stop the job with one line and only finite checkpoints,
and the operator's restart passes over the batches that stopped it, up to a limit."""

from __future__ import annotations

import json
import math
import re

import pytest

from infra import validation
from manifests import job as job_manifest
from tests.conftest import CONTEXT
from tests.training.runs import losses_of, saved_tensors, train_in_process, train_module


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
    saved = {step: saved_tensors(ckpt / f"step_{step:08d}", tmp_path) for step in range(1, 7)}
    for step, tensors in saved.items():
        assert all(torch.isfinite(t).all() for t in tensors.values()), step
    # A skipped step moves neither the weights nor the optimizer's moments and step count.
    for before, after in ((2, 3), (4, 5)):
        assert all(torch.equal(saved[before][k], saved[after][k]) for k in saved[before]), after
    assert not torch.equal(saved[3]["model.lm_head.weight"], saved[4]["model.lm_head.weight"])
    assert saved[6]["optim.lm_head.weight.step"].item() == 4  # steps 1, 2, 4 and 6
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
    assert stopped == (f"training stopped: {limit} steps in a row with a non-finite loss or gradient norm "
                       f"(steps 2-{limit + 1}); last checkpoint step={limit}; the restart passes over steps 2-{limit + 1} "
                       f"(recorded in {ckpt / '_NONFINITE.json'})")
    assert not _watched_by_a_rule(stopped)
    assert sorted(p.name for p in ckpt.iterdir()) == ["_NONFINITE.json"] + [f"step_{s:08d}" for s in range(1, limit + 1)]
    last = saved_tensors(ckpt / f"step_{limit:08d}", tmp_path)
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
            "the restart passes over steps 2-2") in out
    assert sorted(p.name for p in ckpt.iterdir()) == ["_NONFINITE.json", "step_00000001"]


def _poison_batches(patch, bad: set[bytes], seen: dict[int, bytes] | None = None):
    """next_token_loss, NaN wherever its targets are one of the `bad` batches: a failure that
    comes with the data, as a restart from a checkpoint before it would meet it again. `seen`
    gets each call's batch by the run's step (from 1)."""
    import itertools

    train = train_module()
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
        code, clean = train_in_process(workdir, "--max-steps=12", "--log-interval=1")
    assert code == 0, clean[-2000:]
    bad = {batches[s] for s in (5, 6, 7)}
    with pytest.MonkeyPatch.context() as patch:
        _poison_batches(patch, bad)
        code, out = train_in_process(workdir, "--max-steps=12", *common)
    assert code == 3 and "the restart passes over steps 5-7" in out, out[-2000:]
    seen: dict[int, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:  # the operator's restart: the same data, the same poison
        _poison_batches(patch, bad, seen)
        code, out = train_in_process(workdir, "--max-steps=12", *common)
    assert code == 0, out[-2000:]
    lines = out.splitlines()
    assert f"resumed from {ckpt / 'step_00000004'} at step=4" in lines
    assert ("passing over steps 5-7: an earlier run stopped on non-finite values there; their batches are not trained on") in lines
    assert sorted(losses_of(out)) == [8, 9, 10, 11, 12] and " skipped: " not in out
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
    codes = [train_in_process(workdir, *args)[0] for _ in range(2)]
    assert codes == [3, 3]
    code, out = train_in_process(workdir, *args)
    (line,) = [l for l in out.splitlines() if l.startswith("training will not resume")]
    assert code == 4 and "(2 windows, at most 1)" in line and f"then delete {ckpt / '_NONFINITE.json'}" in line
    assert json.loads((ckpt / "_NONFINITE.json").read_text())["windows"] == [[2, 4], [5, 7]]
    assert not _watched_by_a_rule(line)
