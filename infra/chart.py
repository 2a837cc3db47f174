"""The HyperPod dependencies Helm chart: fetch a pinned revision and prepare it for deploy.

`make hyperpod-chart ENV=dev` runs `python -m infra.chart prepare --env dev`: a shallow git
fetch of `hyperpod.helm_chart.revision`, `helm dependency build` on the chart folder, then
an atomic move into `build/hyperpod-chart/<revision>/`, and a check that the fetched chart
still says what infra/hyperpod_chart.py (the chart's data) says. The stacks install that
folder as a chart asset; `status` tells the Makefile whether it is there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.config import ConfigError, HelmChartSource
from infra.hyperpod_chart import CHART_IMAGES, GPU_OPERATOR_ACCOUNTS, MIG_CONFIGS, gpu_operator_values, value_at
from infra.validation import load_settings

ROOT = Path(__file__).resolve().parent.parent
PREPARED_ROOT = ROOT / "build" / "hyperpod-chart"
MARKER = ".hyperpod-cdk-prepared"


class ChartNotPrepared(RuntimeError):
    pass


def verify_gpu_operator(chart: Path) -> list[str]:
    """What in a prepared chart's GPU operator subchart no longer says what MIG_CONFIGS and
    GPU_OPERATOR_ACCOUNTS say (empty: all as read)."""
    import yaml

    folder = chart / "charts" / "gpu-operator"
    config = folder / "config" / "default-mig-config.yaml"
    if not config.is_file():
        return [f"charts/gpu-operator/config/default-mig-config.yaml is gone; MIG_CONFIGS names {len(MIG_CONFIGS)} configurations"]
    found = {
        name: (devices[0].get("mig-devices", {}) if devices[0].get("mig-enabled") else {})
        for name, devices in (yaml.safe_load(config.read_text()) or {}).get("mig-configs", {}).items()
    }
    problems = [f"gpu-operator: MIG configuration {n!r} is {found.get(n)!r}, MIG_CONFIGS says {d!r}" for n, d in MIG_CONFIGS.items() if found.get(n) != d]
    for region, account in GPU_OPERATOR_ACCOUNTS.items():
        regional = folder / "regional-values" / f"values-{region}.yaml"
        values = yaml.safe_load(regional.read_text()).get("gpu-operator", {}) if regional.is_file() else {}
        want = gpu_operator_values(region)["gpu-operator"]
        if {k: {"repository": v.get("repository")} for k, v in values.items()} != want:
            problems.append(f"gpu-operator: regional-values/values-{region}.yaml no longer names {account}'s repositories")
    return problems


def verify_images(chart: Path) -> list[str]:
    """What in a prepared chart no longer says what CHART_IMAGES says (empty: all as read)."""
    import tarfile

    import yaml

    def values_of(subchart: str) -> dict:
        folder = chart / "charts" / subchart / "values.yaml"
        if folder.is_file():
            return yaml.safe_load(folder.read_text()) or {}
        for packed in sorted((chart / "charts").glob(f"{subchart}-*.tgz")):
            with tarfile.open(packed) as tar:
                return yaml.safe_load(tar.extractfile(f"{subchart}/values.yaml").read()) or {}
        return {}

    problems = []
    for image in CHART_IMAGES:
        repository, tag = image.source.rsplit(":", 1)
        own = values_of(image.subchart)
        for key, role in image.keys.items():
            inner = key.split(".", 1)[1]
            found = value_at(own, inner)
            want = {"repository": repository.split("/", 1)[1] if repository.startswith("docker.io/") else repository, "tag": tag, "uri": ""}[role]
            if role == "tag" and found in ("", None):
                continue  # the chart's own default (its appVersion)
            if found != want:
                problems.append(f"{image.subchart}: {inner} is {found!r}, CHART_IMAGES says {want!r} ({image.where})")
        if not image.keys or "uri" in image.keys.values():
            # Written in a template: a literal, or a tag beside a region map.
            template = chart / "charts" / image.subchart / "templates"
            text = "".join(p.read_text() for p in template.iterdir() if p.is_file()) if template.is_dir() else ""
            literal = image.source if not image.keys else image.tag
            if literal not in text:
                problems.append(f"{image.subchart}: its templates no longer name {literal} ({image.where})")
    return problems


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
    import yaml

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
        # `helm dependency build` does not recurse: a local subchart's own remote dependencies
        # (the GPU operator's NVIDIA chart) are built first, or they are missing at install.
        for sub in sorted((chart / "charts").glob("*/Chart.yaml")):
            if (yaml.safe_load(sub.read_text()) or {}).get("dependencies"):
                _run([helm, "dependency", "build", str(sub.parent)])
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
        prepared = prepare(source)
    except ChartNotPrepared as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    drift = verify_images(prepared) + verify_gpu_operator(prepared)
    for line in drift:
        print(f"error: chart images changed: {line}; update CHART_IMAGES, MIG_CONFIGS or GPU_OPERATOR_ACCOUNTS in infra/hyperpod_chart.py", file=sys.stderr)
    if drift:
        return 1
    print(f"prepared: {prepared}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
