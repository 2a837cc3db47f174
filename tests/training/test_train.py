"""train.py for real: 2 processes over gloo via torchrun, the tiny preset, a local dataset
and a tokenizer trained on the spot (nothing is downloaded)."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import config
from manifests import job as job_manifest
from tests.conftest import CONTEXT, ROOT

TRAIN = ROOT / "training" / "train.py"
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jolly frogs near blue rivers".split()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    work = tmp_path_factory.mktemp("train")
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))) + "." for _ in range(400)]
    (work / "corpus.txt").write_text("\n".join(lines) + "\n")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(work / "corpus.txt")], trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(work / "tok")
    return work


def _torchrun(work: Path, max_steps: int) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TRAIN),
        "--model=tiny", f"--tokenizer={work / 'tok'}", f"--data-files={work / 'corpus.txt'}",
        "--seq-len=32", "--batch-size=4", f"--max-steps={max_steps}", f"--checkpoint-dir={work / 'ckpt'}",
        "--checkpoint-interval=10", "--log-interval=5", "--lr=3e-3", "--warmup-steps=3", "--shuffle-buffer=100",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


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


def test_checkpoints_are_complete_and_listed(first_run, workdir):
    for step in (10, 20, 30):
        manifest = json.loads((workdir / "ckpt" / f"step_{step:08d}" / "_COMPLETE.json").read_text())
        assert manifest["step"] == step and ".metadata" in manifest["files"]


def test_resume_skips_a_truncated_checkpoint_and_continues_at_the_right_step(first_run, workdir):
    latest = workdir / "ckpt" / "step_00000030"
    shard = sorted(latest.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])  # truncated, as by a node lost mid-upload
    partial = workdir / "ckpt" / "step_00000040"  # and one that never got its manifest
    partial.mkdir()
    (partial / ".metadata").write_bytes(b"partial")
    out = _torchrun(workdir, 30).stdout
    assert f"resumed from {workdir / 'ckpt' / 'step_00000020'} at step=20" in out
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
