"""CPU throughput of training/train.py: the tiny preset, 2 gloo processes, a local corpus and
a tokenizer trained on the spot (nothing is downloaded).

    .venv/bin/python tests/bench/bench_train.py --runs 5 [--train OTHER/train.py] [-- extra train.py args]

Prints each run's median tokens/s over the steps after warm-up, and the median of the runs.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jolly frogs near blue rivers".split()


def prepare(work: Path) -> None:
    """A 400-line corpus and a 300-token BPE tokenizer trained on it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))) + "." for _ in range(400)]
    (work / "corpus.txt").write_text("\n".join(lines) + "\n")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(work / "corpus.txt")], trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(work / "tok")


def train_args(work: Path, *, max_steps: int, extra=()) -> list[str]:
    """train.py's arguments for the tiny preset on `work`'s corpus and tokenizer."""
    return [
        "--model=tiny", f"--tokenizer={work / 'tok'}", f"--data-files={work / 'corpus.txt'}",
        "--seq-len=32", "--batch-size=4", f"--max-steps={max_steps}", "--log-interval=5", "--lr=3e-3",
        "--warmup-steps=3", "--shuffle-buffer=100", *extra,
    ]


def train_command(train: Path, work: Path, *, max_steps: int, extra=(), nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(train),
            *train_args(work, max_steps=max_steps, extra=extra)]


def offline_env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def run_once(train: Path, work: Path, steps: int, extra) -> float:
    out = subprocess.run(
        train_command(train, work, max_steps=steps, extra=extra), cwd=work, env=offline_env(),
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    after_warmup = [float(t) for s, t in re.findall(r"^step=(\d+) .*tokens_per_s=(\S+)", out, flags=re.M) if int(s) > 10]
    return statistics.median(after_warmup)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--train", type=Path, default=ROOT / "training" / "train.py")
    p.add_argument("extra", nargs="*")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare(work)
        runs = [run_once(args.train, work, args.steps, args.extra) for _ in range(args.runs)]
    print("runs (tokens/s):", " ".join(f"{r:.0f}" for r in runs))
    print(f"median tokens/s: {statistics.median(runs):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
