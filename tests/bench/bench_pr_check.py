"""The pull request's check (.github/workflows/review.yml's review job, install excluded) against a
plain `cdk synth` of the same environment, paired: each round runs the three one after the
other, in an order that turns round by round, so the machine's noise hits all three alike.

- plain: `cdk synth --quiet -c env=dev` of the pull request's head;
- cold: what the job runs on a runner that has nothing kept (`make synth ENV=dev AGAINST=<base>`: the
  head's synth with the base's beside it in a worktree, then the review);
- warm: the same with the review's baseline cache (cdk.out/review-cache/baselines) as the
  workflow's actions/cache step restores it for a base seen before.

The pull request is a clone of this checkout whose dev GPU count is raised by one line, committed
on top of HEAD (the base). Target: the check within 2x the plain synth, cold and warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_synth import CDK, clone, set_gpu_count

BASELINES = Path("cdk.out") / "review-cache" / "baselines"


def timed(cmd: list[str], cwd: Path, ok=(0,)) -> float:
    """Seconds `cmd` took."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(cwd)})
    took = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")
    return took


def plain(project: Path) -> float:
    with tempfile.TemporaryDirectory() as out:
        return timed([CDK, "synth", "--quiet", "-c", "env=dev", "-o", out], project)


def check(project: Path, base: str, keep_baselines: bool) -> float:
    """The review job's command, `make synth ENV=dev AGAINST=<base>` (its install already done: `-o
    install-synth`), which synthesizes the head and reads the base beside it, then reviews."""
    kept = project / BASELINES
    if not keep_baselines:
        shutil.rmtree(kept, ignore_errors=True)
    # 2: make's status where the review fails the change, which still timed a whole check
    took = timed(["make", "-o", "install-synth", "synth", "ENV=dev", f"AGAINST={base}"], project, ok=(0, 2))
    # Whether the base was synthesized here (cold) or found kept (warm), as the baseline's own log says.
    log = (project / "cdk.out" / "baseline-dev.log").read_text()
    says = "synthesized earlier from the same tree" if keep_baselines else "in a temporary worktree"
    if says not in log:
        raise SystemExit(f"the {'warm' if keep_baselines else 'cold'} check's baseline did not say {says!r}: {log.strip()[-800:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {"plain": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="hyperpod-bench-pr-") as tmp:
        project = clone(Path(tmp) / "clone")
        base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, check=True, capture_output=True, text=True).stdout.strip()
        cdk_json = project / "cdk.json"
        set_gpu_count(cdk_json, lambda n: n + 1)
        subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qam", "one line"],
                       cwd=project, check=True)
        check(project, base, keep_baselines=False)  # warm-up: Node's and Python's own caches, and the first baseline
        order = ["plain", "cold", "warm"]
        for run in range(args.runs):
            for kind in order[run % 3:] + order[:run % 3]:
                rows[kind].append(plain(project) if kind == "plain" else check(project, base, keep_baselines=kind == "warm"))
            print(f"round {run + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in rows.items()), flush=True)
        shutil.rmtree(project, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in rows.items()}
    for kind, values in rows.items():
        print(f"{kind:5}: median {medians[kind]:.1f}s of {args.runs} runs {[round(x, 1) for x in values]}")
    ratios = {k: [round(v / p, 2) for v, p in zip(rows[k], rows["plain"])] for k in ("cold", "warm")}
    for kind in ("cold", "warm"):
        print(f"{kind} check / plain synth, paired: median {statistics.median(ratios[kind]):.2f}x {ratios[kind]} (target: <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
