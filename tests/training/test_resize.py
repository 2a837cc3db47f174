"""A non-finite stop, then an elastic resize: the restart on another world size passes over
exactly the documents of the failed window (and of the update before it), no others, and
trains none twice; and so does every later start, from a checkpoint past the window (a crash
after the resized run's next save, then a restart). Real runs, gloo ranks on the CPU as torchrun starts them (fork_ranks.py),
the tiny preset; the documents are counted from the tokens each step trained on
(tests/training/runs.py document_corpus: every token names its document), not from train.py's
own record."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.bench import bench_train
from tests.conftest import ROOT
from tests.training.runs import RankServer, document_corpus, document_tokens, documents_touched

# train.py on each rank, its loss wrapped: every step's chunks (inputs' first token, then the
# targets) written to SEEN.<rank>, one JSON line per step, and NaN on the steps POISON lists; at
# the step CRASH names every rank dies at once before its loss (a node lost: exit 1, no save).
WRAPPER = """
import json, os, sys
sys.path.insert(0, sys.argv.pop(1))
import torch
import train
rank, calls = int(os.environ["RANK"]), [0]
poison = set(json.loads(os.environ.get("POISON", "[]")))
crash = int(os.environ.get("CRASH", "0"))
seen = open(os.environ["SEEN"] + "." + str(rank), "w")
real_logits, real_loss = train.logits_of, train.next_token_loss
def logits_of(model, inputs, *args, **kwargs):
    logits_of.inputs = inputs
    return real_logits(model, inputs, *args, **kwargs)
def next_token_loss(logits, targets):
    calls[0] += 1
    if calls[0] == crash:
        os._exit(1)
    seen.write(json.dumps(torch.cat([logits_of.inputs[:, :1], targets], dim=1).tolist()) + "\\n")
    seen.flush()
    loss = real_loss(logits, targets)
    return loss * float("nan") if calls[0] in poison else loss
train.logits_of, train.next_token_loss = logits_of, next_token_loss
sys.exit(train.train(train.parse_args(sys.argv[1:])))
"""
CHECKPOINT_EVERY = 3
POISONED = (5, 6, 7)
SHUFFLE_BUFFER = 24  # three in a row: train.py's default --max-nonfinite-steps


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("documents")
    files, lengths = document_corpus(folder, per_shard=100)  # the runs below stay inside the first pass
    (folder / "wrapper.py").write_text(WRAPPER)
    return folder, files, lengths


def _run(ranks: RankServer, folder: Path, files, world: int, ckpt: Path, seen: Path, max_steps: int, poison=(), crash=0) -> tuple[int, str, list[list]]:
    """train.py on `world` gloo ranks; returns its exit code, its output and each rank's chunks by step."""
    args = [str(ROOT / "training"), "--model=tiny", f"--tokenizer={folder / 'tok'}", "--data-files", *files, "--seq-len=32",
            "--batch-size=1", "--lr=3e-3", "--warmup-steps=3", f"--max-steps={max_steps}", "--log-interval=1",
            f"--checkpoint-dir={ckpt}", f"--checkpoint-interval={CHECKPOINT_EVERY}", "--keep-checkpoints=20",
            # A shuffle buffer, as the job's: a window's documents sit in it, unread, past the next
            # saves. Small, so the count stays inside the first pass (800 documents).
            f"--shuffle-buffer={SHUFFLE_BUFFER}"]
    env = {**bench_train.offline_env(), "SEEN": str(seen), "POISON": json.dumps(list(poison)), "CRASH": str(crash)}
    result = ranks.run(world, folder / "wrapper.py", args, cwd=folder, env=env, timeout=400)
    chunks = [[json.loads(line) for line in Path(f"{seen}.{rank}").read_text().splitlines()] for rank in range(world)]
    return result.returncode, result.stdout + result.stderr[-3000:], chunks


def _trained(chunks: list[list], steps=None) -> Counter:
    """Tokens of each document in the ranks' chunks (of the steps numbered in `steps`, from 1)."""
    total = Counter()
    for rank_chunks in chunks:
        for number, rows in enumerate(rank_chunks, 1):
            if steps is None or number in steps:
                total += document_tokens(rows)
    return total


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2)], ids=["2->3->3", "3->2->2"])
def test_every_start_after_another_world_size_passes_over_exactly_the_failed_windows_documents(corpus, ranks, tmp_path, before, after):
    folder, files, lengths = corpus
    ckpt = tmp_path / "ckpt"
    code, out, failed = _run(ranks, folder, files, before, ckpt, tmp_path / "failed", 30, poison=POISONED)  # the first failed rank's 3
    first, last = POISONED[0], POISONED[-1]
    assert code != 0 and f"steps {first}-{last}); last checkpoint step={CHECKPOINT_EVERY}" in out, out[-3000:]
    # What the failed run lost since its checkpoint: step 4's update (it made the weights steps
    # 5-7 went non-finite from) and steps 5-7. Their documents, from the tokens themselves.
    lost = set(range(CHECKPOINT_EVERY + 1, last + 1))
    window = set().union(*(documents_touched(rank_chunks, lost) for rank_chunks in failed))
    assert len(window) > 10
    before_checkpoint = _trained(failed, range(1, CHECKPOINT_EVERY + 1))
    passing = (f"passing over the {len(window)} documents of steps {CHECKPOINT_EVERY + 1}-{last} (step {CHECKPOINT_EVERY + 1}'s "
               f"update, then the non-finite steps) on {before} ranks: an earlier run stopped on non-finite values there")

    # The resized run saves at steps 6 and 9, past the window, and every rank dies at step 10
    # (a node lost); the operator's restart resumes from step 9 on the same world size.
    crash = 3 * CHECKPOINT_EVERY + 1
    steps = crash + 4
    # The same checkpoint resumed on the other world size with no record (what a resize trains
    # when nothing failed), uninterrupted, and with it, across the crash and the restart.
    clean = tmp_path / "clean"
    shutil.copytree(ckpt, clean, ignore=shutil.ignore_patterns("_NONFINITE.json"))
    code, out_clean, clean_chunks = _run(ranks, folder, files, after, clean, tmp_path / "clean-seen", steps)
    assert code == 0 and f"re-divided over {after}" in out_clean, out_clean[-3000:]
    code, out, resized = _run(ranks, folder, files, after, ckpt, tmp_path / "resized-seen", steps, crash=crash - CHECKPOINT_EVERY)
    assert code == 1 and passing in out and f"checkpoint saved step={crash - 1} " in out, out[-3000:]
    assert [len(rank_chunks) for rank_chunks in resized] == [crash - 1 - CHECKPOINT_EVERY] * after  # steps 4-9: step 10 died before its loss
    code, out, restarted = _run(ranks, folder, files, after, ckpt, tmp_path / "restarted-seen", steps)
    assert code == 0 and f"resumed from {ckpt / f'step_{crash - 1:08d}'} at step={crash - 1}" in out, out[-3000:]
    assert passing in out and " skipped: " not in out

    clean_counts, resumed = _trained(clean_chunks), _trained(resized) + _trained(restarted)
    # The resize alone trains the window's documents again, what the checkpoint does not hold of
    # them (they were lost with the failure; those dealt behind a whole shard come later) ...
    again = {d for d in window if before_checkpoint[d] < lengths[d] and clean_counts[d]}
    assert len(again) >= 10, (sorted(window), sorted(again))
    # ... and some of them only after the resized run's save at step 9: a start from it must still pass them over.
    late = {d for d in window if _trained(clean_chunks, range(crash - CHECKPOINT_EVERY, steps - CHECKPOINT_EVERY + 1))[d]}
    assert late, sorted(again)
    # Neither the resized run nor the restart trains any of them, ...
    assert {d for d in window if resumed[d]} == set()
    # ... no token twice, counting what the checkpoint holds, ...
    assert {d: n for d, n in (before_checkpoint + resumed).items() if n > lengths[d]} == {}
    # ... and every other document the resize reaches they reach too (they read further, as they
    # pass over the window): none passed over but the window's, none lost in the crash.
    assert {d: (resumed[d], n) for d, n in clean_counts.items() if d not in window and resumed[d] < n} == {}
