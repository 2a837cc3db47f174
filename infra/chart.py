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
from dataclasses import dataclass, field
from pathlib import Path

from infra.config import ConfigError, HelmChartSource, load_settings

ROOT = Path(__file__).resolve().parent.parent
PREPARED_ROOT = ROOT / "build" / "hyperpod-chart"
MARKER = ".hyperpod-cdk-prepared"


class ChartNotPrepared(RuntimeError):
    pass


# ---------------------------------------------------------------------- the chart's images

# The images the chart renders at the pinned revision (aws/sagemaker-hyperpod-cli a00b22d17ea9,
# helm_chart/HyperPodHelmChart), read from its values and templates and those of its remote
# dependencies; `prepare` checks the fetched chart still says the same. Without a NAT none of
# the public ones can be pulled, and without the device plugin no node advertises its GPUs.


@dataclass(frozen=True)
class ChartImage:
    subchart: str
    # The values switch the chart renders it under (every one defaults to on).
    condition: str
    # What the chart pulls with its own values; {account}/{region} for the health agent.
    source: str
    # Values that point it elsewhere: path -> "repository", "tag" or "uri" (none: fixed in a template).
    keys: dict = field(default_factory=dict)
    # The device it serves ("" for every cluster): nodes advertise it only while it runs.
    serves: str = ""
    where: str = ""
    # What the search for its tag's digest found, beside DIGEST_SEARCH (pinning()).
    digest_note: str = ""

    def upstream(self, region: str) -> str:
        account, image_region = health_agent_registry(region)
        return self.source.format(account=account, region=image_region)

    @property
    def path(self) -> str:
        """The repository path without its registry, e.g. nvidia/k8s-device-plugin."""
        repository = self.source.rsplit(":", 1)[0]
        return repository.split("/", 1)[1]

    @property
    def tag(self) -> str:
        return self.source.rsplit(":", 1)[1]

    @property
    def digest_key(self) -> str | None:
        """The value that could pin it by digest: its tag (each template joins repository:tag,
        so `<tag>@sha256:<hex>` renders name:tag@digest, a reference the distribution grammar
        takes) or its whole reference; None where its template writes the image itself."""
        return next((key for key, role in self.keys.items() if role in ("tag", "uri")), None)


CHART_IMAGES = (
    ChartImage(
        "training-operators", "trainingOperators.enabled", "docker.io/kubeflow/training-operator:v1-855e096",
        {"training-operators.image.repository": "repository", "training-operators.image.tag": "tag"},
        where="charts/training-operators/values.yaml",
        digest_note="the awsome Terraform's copy list (tools/ecr-images.conf) names the tag too",
    ),
    ChartImage(
        "mpi-operator", "mpi-operator.enabled", "docker.io/mpioperator/mpi-operator:0.5",
        {"mpi-operator.mpiOperator.image.repository": "repository", "mpi-operator.mpiOperator.image.tag": "tag"},
        where="charts/mpi-operator/values.yaml",
        digest_note="the awsome Terraform's copy list (tools/ecr-images.conf) names the tag too",
    ),
    ChartImage(
        "nvidia-device-plugin", "nvidia-device-plugin.devicePlugin.enabled", "nvcr.io/nvidia/k8s-device-plugin:v0.16.1",
        {"nvidia-device-plugin.image.repository": "repository", "nvidia-device-plugin.image.tag": "tag"},
        serves="nvidia.com/gpu", where="remote chart nvidia-device-plugin 0.16.1, values.yaml (tag: v + appVersion)",
        digest_note="NVIDIA's gpu-operator v24.6.0 OLM bundle gives the digest of v0.16.1-ubi8, another build (v0.16.1 "
        "is the ubuntu22.04 one: deployments/container/Makefile at v0.16.1)",
    ),
    ChartImage(
        "aws-efa-k8s-device-plugin", "aws-efa-k8s-device-plugin.devicePlugin.enabled",
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.13",
        {"aws-efa-k8s-device-plugin.image.repository": "repository", "aws-efa-k8s-device-plugin.image.tag": "tag"},
        serves="vpc.amazonaws.com/efa", where="remote chart aws-efa-k8s-device-plugin v0.5.20, values.yaml (us-west-2 whatever the region)",
        digest_note="AWS's own image, which the awsome copy script leaves where it is",
    ),
    ChartImage(
        "neuron-device-plugin", "neuron-device-plugin.devicePlugin.enabled", "public.ecr.aws/neuron/neuron-device-plugin:2.19.16.0",
        serves="aws.amazon.com/neuron", where="charts/neuron-device-plugin/templates/k8s-neuron-device-plugin.yaml (a literal)",
    ),
    ChartImage(
        "health-monitoring-agent", "health-monitoring-agent.enabled",
        "{account}.dkr.ecr.{region}.amazonaws.com/hyperpod-health-monitoring-agent:1.0.1892.0_1.0.424.0",
        {"health-monitoring-agent.hmaimage": "uri"},
        where="charts/health-monitoring-agent/templates/_helpers.tpl (account by region)",
        digest_note="AWS's own image (one account per region), which the awsome copy script leaves where it is",
    ),
)
# Where the digest of each image's tag was looked for, offline. None of them gives one, so every
# image the chart renders is pinned by its tag, which its registry can move to other content.
DIGEST_SEARCH = (
    "the chart at its pinned revision, the quick setup and awsome-distributed-ai references, and a search of the "
    "stored public repositories and docs"
)
# The GPU operator subchart's images (MIG groups only): AWS's copies in its regional accounts
# (GPU_OPERATOR_ACCOUNTS, GPU_OPERATOR_REPOSITORIES), by the tags of its values.yaml.
GPU_OPERATOR_DIGEST_NOTE = (
    "NVIDIA's gpu-operator v26.3.1 OLM bundle gives the digests of NVIDIA's own images of these tags, not of AWS's "
    "copies, which keep them only if each was copied as a whole index"
)


def pinning() -> str:
    """How each image the chart renders is pinned, and why no tighter, from CHART_IMAGES: the
    README's security section shows it, and a test holds the README to it."""
    lines = [f"Chart images, each pinned by tag only (digests looked for in {DIGEST_SEARCH}):", ""]
    for image in CHART_IMAGES:
        line = f"- `{image.subchart}` `{image.source}`: "
        if image.digest_key is None:
            line += f"no value can change it, its template writes the reference: {image.where}"
        else:
            digest = f"{image.tag}@sha256:<hex>" if image.keys[image.digest_key] == "tag" else "<repository>:<tag>@sha256:<hex>"
            line += f"`{image.digest_key}` would take `{digest}`, but no source gives that digest; {image.digest_note}"
        lines.append(line)
    lines.append(f"- the GPU operator's {', '.join(GPU_OPERATOR_REPOSITORIES)} (with MIG groups): {GPU_OPERATOR_DIGEST_NOTE}")
    lines.append(
        "- their copies in a network without NAT (`stacks/image_mirror.py`): the same tags, copied again when a tag "
        "changes; the copier (containers/image's docker transport) would take `name@sha256:<hex>` as its source, so a "
        "known digest would pin what is copied; without one it copies what the tag names on the day"
    )
    return "\n".join(lines)


# Registries that limit pulls without credentials, each with its limit as it documents it. Where
# the images are copied, the copier is a Lambda whose outbound address AWS shares with other
# functions, so a limit may be spent before the copy asks.
DOCKER_HUB = "docker.io/"
ANONYMOUS_PULL_LIMITS = {
    DOCKER_HUB: "Docker Hub allows 10 pulls an hour per IPv4 address without credentials (docs.docker.com/docker-hub/usage)",
}
# The health agent's registry account per region (its _helpers.tpl); other regions fall back to us-east-1's.
HEALTH_AGENT_ACCOUNTS = {
    "us-east-1": "767398015722", "us-west-2": "905418368575", "us-east-2": "851725546812", "us-west-1": "011528288828",
    "eu-central-1": "211125453373", "eu-north-1": "654654141839", "eu-west-1": "533267293120", "eu-west-2": "011528288831",
    "eu-south-2": "626887787726", "ap-northeast-1": "533267052152", "ap-south-1": "011528288864",
    "ap-southeast-1": "905418428165", "ap-southeast-2": "851725636348", "ap-southeast-3": "971422672635",
    "ap-southeast-4": "084375568333", "ca-central-1": "843976229209", "sa-east-1": "025066253954",
}
# The device plugins' own tolerations in the chart's values.yaml: a list our values replace
# whole, so extra tolerations for a group's taints go beside these.
DEVICE_PLUGIN_TOLERATIONS = {
    "nvidia-device-plugin": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "sagemaker.amazonaws.com/node-health-status", "operator": "Equal", "value": "Unschedulable", "effect": "NoSchedule"},
    ],
    "aws-efa-k8s-device-plugin": [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"effect": "NoSchedule", "key": "aws.amazon.com/efa", "operator": "Exists"},
        {"key": "sagemaker.amazonaws.com/node-health-status", "operator": "Equal", "value": "Unschedulable", "effect": "NoSchedule"},
    ],
}


# ------------------------------------------------------------------- GPU partitioning (MIG)

# The chart's GPU operator subchart (charts/gpu-operator, off by default): NVIDIA's GPU operator
# with the mixed MIG strategy, its MIG manager reading the ConfigMap "default-mig-config" the
# subchart writes from config/default-mig-config.yaml. A node's nvidia.com/mig.config label names
# one of these configurations; every GPU of the node is cut into these slices (per GPU).
# Read at the pinned revision; `prepare` checks the fetched chart still says the same.
MIG_CONFIGS: dict[str, dict[str, int]] = {
    'all-disabled': {},
    'all-1g.10gb': {'1g.10gb': 7},
    'all-1g.5gb': {'1g.5gb': 7},
    'all-1g.18gb': {'1g.18gb': 7},
    'all-3g.40gb': {'3g.40gb': 2},
    'all-3g.20gb': {'3g.20gb': 2},
    'all-3g.71gb': {'3g.71gb': 2},
    'all-7g.80gb': {'7g.80gb': 1},
    'all-7g.40gb': {'7g.40gb': 1},
    'all-7g.141gb': {'7g.141gb': 1},
    'mixed-1-3g.40gb-1-4g.40gb': {'3g.40gb': 1, '4g.40gb': 1},
    'mixed-1-3g.20gb-1-4g.20gb': {'3g.20gb': 1, '4g.20gb': 1},
    'mixed-1-3g.71gb-1-4g.71gb': {'3g.71gb': 1, '4g.71gb': 1},
    'mixed-1-1g.10gb-1-2g.20gb-1-4g.40gb': {'1g.10gb': 1, '2g.20gb': 1, '4g.40gb': 1},
    'mixed-1-1g.5gb-1-2g.10gb-1-4g.20gb': {'1g.5gb': 1, '2g.10gb': 1, '4g.20gb': 1},
    'mixed-1-1g.18gb-1-2g.35gb-1-4g.71gb': {'1g.18gb': 1, '2g.35gb': 1, '4g.71gb': 1},
    'mixed-3-1g.10gb-1-4g.40gb': {'1g.10gb': 3, '4g.40gb': 1},
    'mixed-3-1g.5gb-1-4g.20gb': {'1g.5gb': 3, '4g.20gb': 1},
    'mixed-3-1g.18gb-1-4g.71gb': {'1g.18gb': 3, '4g.71gb': 1},
    'mixed-1-1g.10gb-1-2g.20gb-1-3g.40gb': {'1g.10gb': 1, '2g.20gb': 1, '3g.40gb': 1},
    'mixed-1-1g.5gb-1-2g.10gb-1-3g.20gb': {'1g.5gb': 1, '2g.10gb': 1, '3g.20gb': 1},
    'mixed-1-1g.18gb-1-2g.35gb-1-3g.71gb': {'1g.18gb': 1, '2g.35gb': 1, '3g.71gb': 1},
    'mixed-3-1g.10gb-1-3g.40gb': {'1g.10gb': 3, '3g.40gb': 1},
    'mixed-3-1g.5gb-1-3g.20gb': {'1g.5gb': 3, '3g.20gb': 1},
    'mixed-3-1g.18gb-1-3g.71gb': {'1g.18gb': 3, '3g.71gb': 1},
    'mixed-2-2g.20gb-1-3g.40gb': {'2g.20gb': 2, '3g.40gb': 1},
    'mixed-2-2g.10gb-1-3g.20gb': {'2g.10gb': 2, '3g.20gb': 1},
    'mixed-2-2g.35gb-1-3g.71gb': {'2g.35gb': 2, '3g.71gb': 1},
    'mixed-2-1g.10gb-1-2g.20gb-1-3g.40gb': {'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1},
    'mixed-2-1g.5gb-1-2g.10gb-1-3g.20gb': {'1g.5gb': 2, '2g.10gb': 1, '3g.20gb': 1},
    'mixed-2-1g.18gb-1-2g.35gb-1-3g.71gb': {'1g.18gb': 2, '2g.35gb': 1, '3g.71gb': 1},
    'mixed-4-1g.10gb-1-3g.40gb': {'1g.10gb': 4, '3g.40gb': 1},
    'mixed-4-1g.5gb-1-3g.20gb': {'1g.5gb': 4, '3g.20gb': 1},
    'mixed-4-1g.18gb-1-3g.71gb': {'1g.18gb': 4, '3g.71gb': 1},
    'mixed-1-1g.10gb-3-2g.20gb': {'1g.10gb': 1, '2g.20gb': 3},
    'mixed-1-1g.5gb-3-2g.10gb': {'1g.5gb': 1, '2g.10gb': 3},
    'mixed-1-1g.18gb-3-2g.35gb': {'1g.18gb': 1, '2g.35gb': 3},
    'mixed-3-1g.10gb-2-2g.20gb': {'1g.10gb': 3, '2g.20gb': 2},
    'mixed-3-1g.5gb-2-2g.10gb': {'1g.5gb': 3, '2g.10gb': 2},
    'mixed-3-1g.18gb-2-2g.35gb': {'1g.18gb': 3, '2g.35gb': 2},
    'mixed-5-1g.10gb-1-2g.20gb': {'1g.10gb': 5, '2g.20gb': 1},
    'mixed-5-1g.5gb-1-2g.10gb': {'1g.5gb': 5, '2g.10gb': 1},
    'mixed-5-1g.18gb-1-2g.35gb': {'1g.18gb': 5, '2g.35gb': 1},
    'all-1g.34gb': {'1g.34gb': 7},
    'all-1g.67gb': {'1g.67gb': 4},
    'all-2g.67gb': {'2g.67gb': 3},
    'all-3g.135gb': {'3g.135gb': 2},
    'all-4g.135gb': {'4g.135gb': 1},
    'all-7g.269gb': {'7g.269gb': 1},
    'mixed-1-3g.135gb-1-4g.135gb': {'3g.135gb': 1, '4g.135gb': 1},
    'mixed-1-1g.34gb-1-2g.67gb-1-4g.135gb': {'1g.34gb': 1, '2g.67gb': 1, '4g.135gb': 1},
    'mixed-3-1g.34gb-1-4g.135gb': {'1g.34gb': 3, '4g.135gb': 1},
    'mixed-1-1g.34gb-1-2g.67gb-1-3g.135gb': {'1g.34gb': 1, '2g.67gb': 1, '3g.135gb': 1},
    'mixed-3-1g.34gb-1-3g.135gb': {'1g.34gb': 3, '3g.135gb': 1},
    'mixed-2-2g.67gb-1-3g.135gb': {'2g.67gb': 2, '3g.135gb': 1},
    'mixed-2-1g.34gb-1-2g.67gb-1-3g.135gb': {'1g.34gb': 2, '2g.67gb': 1, '3g.135gb': 1},
    'mixed-4-1g.34gb-1-3g.135gb': {'1g.34gb': 4, '3g.135gb': 1},
    'mixed-1-1g.34gb-3-2g.67gb': {'1g.34gb': 1, '2g.67gb': 3},
    'mixed-3-1g.34gb-2-2g.67gb': {'1g.34gb': 3, '2g.67gb': 2},
    'mixed-5-1g.34gb-1-2g.67gb': {'1g.34gb': 5, '2g.67gb': 1},
}
# Where the subchart's images come from: AWS's copies in ECR, one account per region (its
# regional-values/values-<region>.yaml, which the chart does not read by itself: the awsome
# Terraform passes the file as values; here they are passed from this table). No file, no
# operator in that region.
GPU_OPERATOR_ACCOUNTS = {
    "ap-northeast-1": "248189928082", "ap-northeast-2": "743267407464", "ap-south-1": "183295424886",
    "ap-south-2": "580982410692", "ap-southeast-1": "235494799058", "ap-southeast-2": "495599779797",
    "ap-southeast-3": "112551748145", "ap-southeast-4": "872515262625", "ca-central-1": "035462350821",
    "eu-central-1": "816069136154", "eu-north-1": "495599756225", "eu-south-2": "765762660796",
    "eu-west-1": "741448945724", "eu-west-2": "869935108213", "sa-east-1": "985539796278",
    "us-east-1": "463470961310", "us-east-2": "940482419867", "us-west-1": "034362067326",
    "us-west-2": "586794468202",
}
# Each image's repository under that registry (the regional files' paths).
GPU_OPERATOR_REPOSITORIES = {
    "operator": "", "toolkit": "/mirror-k8s", "devicePlugin": "", "gfd": "", "migManager": "/mirror-cloud-native",
    "validator": "/mirror-cloud-native",
}


def gpu_operator_values(region: str) -> dict:
    """The subchart's values for `region`: on, with AWS's regional copies of its images."""
    registry = f"{GPU_OPERATOR_ACCOUNTS[region]}.dkr.ecr.{region}.{url_suffix(region)}"
    images = {key: {"repository": registry + path} for key, path in GPU_OPERATOR_REPOSITORIES.items()}
    return {"enabled": True, "gpu-operator": images}


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


def mirror_repository(settings, image: ChartImage) -> str:
    """Where this environment keeps its copy of `image`, in its own account and region."""
    return f"{settings.account}.dkr.ecr.{settings.region}.{url_suffix(settings.region)}/{mirror_name(settings, image)}"


def mirror_name(settings, image: ChartImage) -> str:
    return f"{settings.prefix}-{settings.env_name}/{image.path}"


def url_suffix(region: str) -> str:
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def mirror_values(settings, enabled: dict) -> dict:
    """Chart values that point every image `enabled` renders at this environment's copy."""
    values: dict = {}
    for image in CHART_IMAGES:
        if _get(enabled, image.condition) is False:
            continue
        if not image.keys:
            raise ValueError(f"{image.subchart}: {image.source} is fixed in its template and cannot be pointed at a copy")
        repository = mirror_repository(settings, image)
        for key, role in image.keys.items():
            _set(values, key, {"repository": repository, "tag": image.tag, "uri": f"{repository}:{image.tag}"}[role])
    return values


def _set(values: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        values = values.setdefault(part, {})
    values[last] = value


def health_agent_registry(region: str) -> tuple[str, str]:
    """(account, region) of the health agent image the chart picks for `region`."""
    if region in HEALTH_AGENT_ACCOUNTS:
        return HEALTH_AGENT_ACCOUNTS[region], region
    return HEALTH_AGENT_ACCOUNTS["us-east-1"], "us-east-1"


def rendered_images(values: dict, region: str) -> dict[str, str]:
    """subchart -> the image it renders with `values` (only those switched on), as the chart's
    templates compose it from the keys above."""
    out = {}
    for image in CHART_IMAGES:
        if _get(values, image.condition) is False:
            continue
        repository, tag = image.upstream(region).rsplit(":", 1)
        parts = {"repository": repository, "tag": tag, "uri": None}
        for key, role in image.keys.items():
            if _get(values, key) is not None:
                parts[role] = _get(values, key)
        out[image.subchart] = parts["uri"] or f"{parts['repository']}:{parts['tag']}"
    return out


def _get(values: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(values, dict) or part not in values:
            return None
        values = values[part]
    return values


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
            found = _get(own, inner)
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
        print(f"error: chart images changed: {line}; update CHART_IMAGES, MIG_CONFIGS or GPU_OPERATOR_ACCOUNTS in infra/chart.py", file=sys.stderr)
    if drift:
        return 1
    print(f"prepared: {prepared}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
