"""`make bench`: full-app synth of the default environment against a one-bucket app.

Both go through the pinned CDK CLI on the venv's Node, alternating, so machine noise hits
both alike. Prints each median and the ratio (target: within 3x).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CDK = str(ROOT / "node_modules" / ".bin" / "cdk")


def synth_seconds(app: str | None) -> float:
    with tempfile.TemporaryDirectory() as out:
        cmd = [CDK, "synth", "--quiet", "-o", out]
        # As make synth does without a prepared chart: all templates, bundling only the network.
        cmd += ["--app", app] if app else ["--exclusively", "*-network"]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trivial_app = f"{sys.executable} tests/bench/one_bucket_app.py"
    full, trivial = [], []
    for _ in range(args.runs):
        full.append(synth_seconds(None))
        trivial.append(synth_seconds(trivial_app))
    f, t = statistics.median(full), statistics.median(trivial)
    print(f"full app (env dev): median {f:.2f}s of {args.runs} runs {[round(x, 2) for x in full]}")
    print(f"one-bucket app:     median {t:.2f}s of {args.runs} runs {[round(x, 2) for x in trivial]}")
    print(f"ratio: {f / t:.2f}x (target <= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
