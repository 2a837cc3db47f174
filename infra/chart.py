"""The HyperPod dependencies Helm chart: fetch a pinned revision and prepare it for deploy.

`make hyperpod-chart ENV=dev` runs `python -m infra.chart prepare --env dev`: a shallow git
fetch of `hyperpod.helm_chart.revision`, `helm dependency build` on the chart folder, then
an atomic move into `build/hyperpod-chart/<revision>/`. The stacks install that folder as a
chart asset; `status` tells the Makefile whether it is there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.config import ConfigError, HelmChartSource, load_settings

ROOT = Path(__file__).resolve().parent.parent
PREPARED_ROOT = ROOT / "build" / "hyperpod-chart"
MARKER = ".hyperpod-cdk-prepared"


class ChartNotPrepared(RuntimeError):
    pass


def prepared_dir(revision: str, root: Path | None = None) -> Path:
    return (root or PREPARED_ROOT) / revision / "HyperPodHelmChart"


def is_prepared(revision: str, root: Path | None = None) -> bool:
    chart = prepared_dir(revision, root)
    return (chart / "Chart.yaml").is_file() and (chart / MARKER).is_file()


def not_prepared_message(env: str, revision: str) -> str:
    return (
        f"the HyperPod dependencies chart (revision {revision[:12]}) is not prepared: "
        f"run `make hyperpod-chart ENV={env}` (needs git and helm), then deploy again"
    )


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ChartNotPrepared(f"{' '.join(cmd)} failed: {result.stderr.strip()[-500:]}")


def prepare(source: HelmChartSource, root: Path | None = None, helm: str = "helm") -> Path:
    """Fetch `source.revision` and build the chart's dependencies into `root`."""
    root = root or PREPARED_ROOT
    for tool in ("git", helm):
        if shutil.which(tool) is None:
            raise ChartNotPrepared(f"{tool} is not on PATH; install it to prepare the chart")
    target = prepared_dir(source.revision, root)
    if is_prepared(source.revision, root):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        checkout = Path(tmp) / "src"
        checkout.mkdir()
        _run(["git", "init", "--quiet"], checkout)
        _run(["git", "fetch", "--quiet", "--depth", "1", source.repository, source.revision], checkout)
        _run(["git", "checkout", "--quiet", "FETCH_HEAD"], checkout)
        chart = checkout / source.path
        if not (chart / "Chart.yaml").is_file():
            raise ChartNotPrepared(f"{source.path} at {source.revision[:12]} has no Chart.yaml")
        _run([helm, "dependency", "build", str(chart)])
        (chart / MARKER).write_text(json.dumps({"repository": source.repository, "revision": source.revision}))
        staged = Path(tmp) / "HyperPodHelmChart"
        shutil.move(str(chart), staged)
        target.parent.mkdir(parents=True, exist_ok=True)
        staged.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.chart", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "status"])
    parser.add_argument("--env", default="dev")
    args = parser.parse_args(argv)
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    try:
        settings, _ = load_settings(context, args.env)
    except ConfigError as err:
        print("\n".join(f"error: {p}" for p in err.problems), file=sys.stderr)
        return 2
    source = settings.hyperpod.helm_chart
    if args.command == "status":
        ready = is_prepared(source.revision)
        print(f"prepared: {prepared_dir(source.revision)}" if ready else not_prepared_message(args.env, source.revision))
        return 0 if ready else 1
    try:
        print(f"prepared: {prepare(source)}")
    except ChartNotPrepared as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
