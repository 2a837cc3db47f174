"""The HyperPod dependencies Helm chart as the stacks and the config read it: the images it
renders and the values that point them elsewhere, the GPU operator's MIG configurations and
regional images, the device plugins' tolerations. Data only, read at the pinned revision
(aws/sagemaker-hyperpod-cli, helm_chart/HyperPodHelmChart); `python -m infra.chart prepare`
(infra/chart.py) fetches that revision and checks it still says what this module says.
"""

from __future__ import annotations

from dataclasses import dataclass, field


# ---------------------------------------------------------------------- the chart's images

# The images the chart renders at the pinned revision (aws/sagemaker-hyperpod-cli a00b22d17ea9,
# helm_chart/HyperPodHelmChart), read from its values and templates and those of its remote
# dependencies; `python -m infra.chart prepare` checks the fetched chart still says the same.
# Without a NAT none of the public ones can be pulled, and without the device plugin no node
# advertises its GPUs.


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
    security page (docs/security.md) shows it, and a test holds the page to it."""
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
# Read at the pinned revision; `python -m infra.chart prepare` checks the fetched chart still
# says the same.
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
        if value_at(enabled, image.condition) is False:
            continue
        if not image.keys:
            raise ValueError(f"{image.subchart}: {image.source} is fixed in its template and cannot be pointed at a copy")
        repository = mirror_repository(settings, image)
        for key, role in image.keys.items():
            set_value(values, key, {"repository": repository, "tag": image.tag, "uri": f"{repository}:{image.tag}"}[role])
    return values


def set_value(values: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        values = values.setdefault(part, {})
    values[last] = value


def image_partitions() -> set[str]:
    """The partitions the pinned chart has a health agent image in: those of the regions its _helpers.tpl
    names. Elsewhere it falls back to us-east-1's registry, which ECR of another partition cannot pull
    from (credentials and registries are per partition)."""
    from infra import naming

    return {naming.partition(region) for region in HEALTH_AGENT_ACCOUNTS}


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
        if value_at(values, image.condition) is False:
            continue
        repository, tag = image.upstream(region).rsplit(":", 1)
        parts = {"repository": repository, "tag": tag, "uri": None}
        for key, role in image.keys.items():
            if value_at(values, key) is not None:
                parts[role] = value_at(values, key)
        out[image.subchart] = parts["uri"] or f"{parts['repository']}:{parts['tag']}"
    return out


def value_at(values: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(values, dict) or part not in values:
            return None
        values = values[part]
    return values
