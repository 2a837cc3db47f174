"""`make bench`: full-app synth of the default environment against a one-bucket app, and the
review of a one-line change to it against a plain `cdk synth` of the same environment.

The synths go through the pinned CDK CLI on the venv's Node, alternating, so machine noise hits
both alike (target: within 3x). The review is `hyperpod-cdk review --env dev` in a clone of this
checkout whose dev GPU count is raised by one line, against the clone's HEAD: after one warm-up
review (which synthesizes HEAD once and keeps it, as a reviewer's earlier review does), each run
raises the count again, so each review synthesizes, lints and diffs a change it has not seen
(target: within 2.5x of the plain synth).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CDK = str(ROOT / "node_modules" / ".bin" / "cdk")
# The one line a review's change touches: dev's GPU group count.
GPU_LINE = re.compile(r'(\{"name": "gpu", "instance_type": "ml\.g5\.8xlarge", "count": )(\d+)(\})')


def set_gpu_count(cdk_json: Path, count) -> None:
    """Rewrite dev's GPU group count in cdk.json to count(the present one): a one-line change."""
    text, changed = GPU_LINE.subn(lambda m: f"{m.group(1)}{count(int(m.group(2)))}{m.group(3)}", cdk_json.read_text(), count=1)
    if not changed:
        raise SystemExit(f"{cdk_json}: dev's GPU group line is not where the bench changes it")
    cdk_json.write_text(text)


def synth_seconds(app: str | None) -> float:
    with tempfile.TemporaryDirectory() as out:
        cmd = [CDK, "synth", "--quiet", "-o", out]
        # As make synth does without a prepared chart: all templates, bundling only the network.
        cmd += ["--app", app] if app else ["--exclusively", "*-network"]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - start


def clone(into: Path) -> Path:
    """A clone of this checkout's HEAD that borrows its .venv and node_modules."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
    for shared in (".venv", "node_modules"):
        if (into / shared).is_symlink():  # a checkout that tracks the links: point them here all the same
            (into / shared).unlink()
        (into / shared).symlink_to(ROOT / shared)
    return into


def review_seconds(project: Path, count: int) -> float:
    """`hyperpod-cdk review --env dev --against HEAD` of dev's GPU count set to `count` (one line)."""
    cdk_json = project / "cdk.json"
    set_gpu_count(cdk_json, lambda _: count)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.main", "review", "--env", "dev", "--against", "HEAD", "--quiet"],
                          cwd=project, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: the review fails the change, which still timed a whole review
        raise SystemExit(f"review failed: {done.stderr.strip()[-500:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trivial_app = f"{sys.executable} tests/bench/one_bucket_app.py"
    full, trivial, review = [], [], []
    with tempfile.TemporaryDirectory(prefix="hyperpod-bench-") as tmp:
        project = clone(Path(tmp) / "clone")
        review_seconds(project, 2)  # warm-up: HEAD is synthesized once and kept under cdk.out
        for run in range(args.runs):
            full.append(synth_seconds(None))
            trivial.append(synth_seconds(trivial_app))
            review.append(review_seconds(project, 3 + run))
        shutil.rmtree(project, ignore_errors=True)
    f, t, r = statistics.median(full), statistics.median(trivial), statistics.median(review)
    print(f"full app (env dev): median {f:.2f}s of {args.runs} runs {[round(x, 2) for x in full]}")
    print(f"one-bucket app:     median {t:.2f}s of {args.runs} runs {[round(x, 2) for x in trivial]}")
    print(f"ratio: {f / t:.2f}x (target <= 3x)")
    print(f"review of a one-line dev change: median {r:.2f}s of {args.runs} runs {[round(x, 2) for x in review]}")
    print(f"review ratio: {r / f:.2f}x a plain cdk synth of dev (target <= 2.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
