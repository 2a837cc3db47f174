"""The HyperPod cluster: instance groups and their options, autoscaling, the dependencies chart."""

from __future__ import annotations

import datetime
import re
from typing import Any, Literal, Optional

from pydantic import Field

from infra import catalogue, hyperpod_chart, timing
from infra.config.base import Model


class Taint(Model):
    key: str = Field(min_length=1, max_length=253, description="Taint key.")
    value: Optional[str] = Field(default=None, max_length=63, description="Taint value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(default="NoSchedule", description="Taint effect.")


class RollingBatch(Model):
    """How many instances an AMI update takes at a time."""

    unit: Literal["instances", "percent"] = Field(default="instances", description="Instances, or a percentage of the group.")
    value: int = Field(default=1, ge=1, description="Batch size.")

    @property
    def cfn_type(self) -> str:
        return "INSTANCE_COUNT" if self.unit == "instances" else "CAPACITY_PERCENTAGE"


class Deployment(Model):
    """How an AMI update rolls through a group (the schema's DeploymentConfig): in batches,
    waiting between them, rolled back on an alarm."""

    batch: RollingBatch = Field(default=RollingBatch(), description="Instances per rolling batch.")
    rollback_batch: Optional[RollingBatch] = Field(default=None, description="Instances per batch when rolling back.")
    wait_seconds: int = Field(default=0, description="Wait between batches, in seconds.")
    rollback_alarms: tuple[str, ...] = Field(default=(), description="CloudWatch alarm names that roll the update back.")


class ScheduledUpdate(Deployment):
    """AMI updates on a schedule (ScheduledUpdateConfig): rolling, rolled back on an alarm."""

    schedule: str = Field(
        description="`cron(Minutes Hours Day-of-month Month Day-of-week Year)`, as the schema's pattern allows; it must be able to "
        "fire.",
    )


# What auto-patching does to a group (botocore's sagemaker model, ClusterAutoPatchConfig): both idle
# strategies cordon all instances when a patch starts; IdleWaitWindowInSeconds, "The default is 86400",
# bounds the wait for idle, after which the instances not patched are uncordoned on the old AMI. Neither
# the window nor DrainFirst/DrainPolicy is in CloudFormation's schema yet (tests/infra/test_cfn_tripwires.py).
AUTO_PATCH_IDLE_WAIT_DEFAULT_SECONDS = 86_400
AUTO_PATCH_SOURCE = "SageMaker API reference, ClusterAutoPatchConfig (botocore's sagemaker model)"


def auto_patch_effect(strategy: str, instances: int, accelerators: int | None) -> str:
    """In one sentence, what a patch does to a group of `instances` nodes with `accelerators` each."""
    gpus = f" and their {accelerators * instances} accelerators" if accelerators else ""
    how = ("patches each as it goes idle and uncordons it" if strategy == "WhenIdle"
           else "patches none until every one is idle, then all at once" if strategy == "WhenAllIdle"
           else f"applies {strategy}")
    hours = AUTO_PATCH_IDLE_WAIT_DEFAULT_SECONDS // 3600
    return (f"{strategy} cordons all {instances} instance(s) when a patch starts, so no new job lands on them{gpus}, "
            f"{how}; it waits up to {AUTO_PATCH_IDLE_WAIT_DEFAULT_SECONDS:,} s ({hours} h, HyperPod's default "
            f"IdleWaitWindowInSeconds, which CloudFormation cannot set yet) before uncordoning the rest on the old AMI "
            f"(source: {AUTO_PATCH_SOURCE})")


class AutoPatch(Deployment):
    """Security-only AMI patches applied as the group's nodes go idle (AutoPatchConfig; HyperPod's
    "AMI automatic patching" page). Its strategy's allowed values are the schema's enum
    (infra/config/limits.py): WhenIdle patches each node as it goes idle, WhenAllIdle waits for all."""

    strategy: str = Field(description="`WhenIdle` (each node as it goes idle) or `WhenAllIdle` (all at once, when all are idle).")


class VolumeEncryption(Model):
    """The nodes' EBS volumes under customer managed KMS keys (VolumeKmsKeyId; HyperPod's page
    "Customer managed AWS KMS key encryption for SageMaker HyperPod", smcluster-cmk)."""

    kms_key_arn: Optional[str] = Field(
        default=None,
        description="Your own key for every group (an ARN in the cluster's region, not an alias); its key policy must let the "
        "execution role `kms:CreateGrant` (for AWS resources) and `kms:DescribeKey` via `sagemaker.<region>.amazonaws.com`, "
        "with no encryption-context condition; `preflight` checks it is enabled and symmetric, that no grant is scoped by "
        "encryption context, and that IAM policies may grant it. Unset: the stack creates one rotating key per instance "
        "group with the key policy of that page (a revoked grant on a shared key would leave other groups' grants).",
    )
    root_volume: bool = Field(
        default=True, description="Encrypt the root volume too (`RootVolume: true`, sized by HyperPod), not only `/opt/sagemaker`."
    )


class InstanceGroup(Model):
    name: str = Field(description="Group name; changing it replaces the group.")
    instance_type: str = Field(
        description="A type SageMaker HyperPod takes (its `ClusterInstanceType` enum in botocore); its vCPUs, memory, "
        "accelerators, GPU memory and EFA interfaces from `infra/instance_types.json`, MIG profiles from NVIDIA's MIG guide; a "
        "type whose figures no source states is accepted with a warning naming them. Changing it replaces the group.",
    )
    count: int = Field(description="Instances, 1 to `hyperpod.max_instances_per_group` (0 when `autoscaled`); updatable in place.")
    autoscaled: bool = Field(
        default=False,
        description="Karpenter scales the group (needs `hyperpod.autoscaling: karpenter`; `count` 0; no deep health checks or training plan).",
    )
    max_count: Optional[int] = Field(
        default=None,
        description="An autoscaled group's most nodes: the NodePool's limit, which quotas must cover.",
    )
    min_count: Optional[int] = Field(
        default=None, description="`MinInstanceCount`: the group is InService once this many run (0 to `count`); unset: all of `count`."
    )
    capacity: Optional[Literal["on_demand", "spot"]] = Field(
        default=None, description="Spot or On-Demand (`CapacityRequirements`); unset: HyperPod's default, On-Demand."
    )
    alternative_instance_types: tuple[str, ...] = Field(
        default=(), description="Further types HyperPod may launch for the group (`InstanceRequirements`, up to 20 in all), with the same accelerators."
    )
    image_id: Optional[str] = Field(
        default=None,
        description="A custom AMI built from the HyperPod AMI (`ImageId`); unset: HyperPod's current AMI.",
    )
    image_release_version: Optional[str] = Field(
        default=None,
        description="A HyperPod AMI release, `MAJOR.MINOR.PATCH` (`ImageReleaseVersion`); unset: the latest at create. Changing "
        "it runs `UpdateClusterSoftware` on the group. Not with `image_id`.",
    )
    scheduled_update: Optional[ScheduledUpdate] = Field(default=None, description="AMI updates on a schedule (`ScheduledUpdateConfig`).")
    auto_patch: Optional[AutoPatch] = Field(
        default=None,
        description="Security-only AMI patches applied as the group's nodes go idle (`AutoPatchConfig`; HyperPod's \"AMI automatic "
        "patching\" page). Both strategies cordon all the group's instances when a patch starts and wait up to 86,400 s (a day, "
        "HyperPod's default idle window, which CloudFormation cannot set yet) for them to go idle: `validate` and `review` say "
        "so per group.",
    )
    network_interface: Optional[Literal["efa", "efa-only"]] = Field(
        default=None, description="EFA interface type (`NetworkInterface`): `efa-only` gives EFA without an IP interface; only on types with EFA."
    )
    threads_per_core: int = Field(default=1, description="Threads per core.")
    ebs_volume_gb: int = Field(default=500, description="Extra EBS volume per node, mounted at `/opt/sagemaker`, in GB.")
    deep_health_checks: Optional[tuple[Literal["InstanceStress", "InstanceConnectivity"], ...]] = Field(
        default=None, description="Deep health checks when nodes start; unset: both on types that support them, none elsewhere."
    )
    labels: dict[str, str] = Field(
        default={}, description="Kubernetes labels on the group's nodes (none under HyperPod's own `sagemaker.amazonaws.com/`)."
    )
    taints: tuple[Taint, ...] = Field(
        default=(),
        description="Kubernetes taints on the group's nodes, one per key and effect (none under HyperPod's own "
        "`sagemaker.amazonaws.com/`).",
    )
    training_plan_arn: Optional[str] = Field(
        default=None, pattern=r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:training-plan/[a-zA-Z0-9\-]+$",
        description="A SageMaker training plan of this partition, region and account that the group draws reserved capacity from.",
    )
    availability_zone: Optional[str] = Field(
        default=None, description="Put the group in another HyperPod subnet (one of `network.hyperpod_subnets`; `OverrideVpcConfig`)."
    )
    mig_profile: Optional[str] = Field(
        default=None,
        description="Cut every GPU of the group into MIG slices: a configuration of the chart's GPU operator (`MIG_CONFIGS` in "
        "infra/hyperpod_chart.py, e.g. `all-1g.10gb`, `mixed-3-1g.10gb-1-4g.40gb`), set as the nodes' `nvidia.com/mig.config` label. "
        "Turns the GPU operator on (A100, H100, H200 groups; refused on A10G, L4, L40S, on flexible groups and without NAT).",
    )

    @property
    def spec(self) -> catalogue.InstanceType:
        return catalogue.CATALOGUE[self.instance_type]

    @property
    def mig_slices(self) -> dict[str, int]:
        """MIG profile -> slices on one node of the group (empty: whole GPUs)."""
        per_gpu = hyperpod_chart.MIG_CONFIGS.get(self.mig_profile or "", {})
        return {profile: n * self.spec.accelerators for profile, n in per_gpu.items()} if self.spec.accelerators else {}

    @property
    def node_labels(self) -> dict[str, str]:
        """The group's labels as HyperPod keeps them on its nodes: its own, and the MIG
        configuration the GPU operator's MIG manager applies (HyperPod's GPU partitioning page)."""
        return {**self.labels, **({"nvidia.com/mig.config": self.mig_profile} if self.mig_profile else {})}

    @property
    def device_resources(self) -> dict[str, int]:
        """What one node of the group advertises: the type's devices, its GPUs as MIG slices
        where the group is partitioned (the operator's mixed strategy advertises no whole GPU)."""
        out = dict(self.spec.device_resources)
        if self.mig_slices:
            del out[self.spec.accelerator_resource]
            out.update({catalogue.MIG_RESOURCE_PREFIX + p: n for p, n in self.mig_slices.items()})
        return out

    @property
    def ceiling(self) -> int:
        """The most nodes the group can have: what quotas must cover."""
        return self.max_count if self.autoscaled and self.max_count else self.count

    @property
    def boot_minutes(self) -> float:
        """Typical minutes until the group's nodes are all Running (infra/timing.py)."""
        spec = catalogue.lookup(self.instance_type)
        return timing.node_minutes(
            accelerated=bool(spec and spec.is_accelerated),
            efa_interfaces=(spec.efa_interfaces or 0) if spec else 0,
            count=self.count,
            checks=self.health_checks,
        )

    @property
    def health_checks(self) -> tuple[str, ...]:
        if self.deep_health_checks is not None:
            return self.deep_health_checks
        if self.autoscaled:  # not supported with Karpenter (HyperPod's NodeClass page)
            return ()
        return ("InstanceStress", "InstanceConnectivity") if self.spec.deep_health_checks else ()


class HelmChartSource(Model):
    """Where `make hyperpod-chart` fetches the HyperPod dependencies chart from."""

    repository: str = Field(default="https://github.com/aws/sagemaker-hyperpod-cli.git", description="Git repository of the chart.")
    revision: str = Field(pattern=r"^[0-9a-f]{40}$", description="The pinned git commit that `make hyperpod-chart` fetches.")
    path: str = Field(default="helm_chart/HyperPodHelmChart", description="The chart's folder inside the repository.")
    release: str = Field(
        default="hyperpod-dependencies",
        description="Helm release name, in `kube-system`; `dependencies` upgrades the release the quick setup installed in place.",
    )
    values: dict[str, Any] = Field(default={}, description="Extra chart values, merged over the ones the stack sets from config.")
    mirror_images: Optional[bool] = Field(
        default=None,
        description="Copy every image the chart renders into this account's ECR at deploy and point the chart at the copies; "
        "unset: exactly in a closed network (`nat_gateways: 0`); `true` for an existing VPC without NAT.",
    )
    docker_hub_secret: Optional[str] = Field(
        default=None,
        description="A Secrets Manager secret with Docker Hub credentials (`user:password` or JSON) for that copy; required "
        "wherever images are copied and the chart renders one from Docker Hub (the training and MPI operators): anonymous pulls "
        "are limited to 10 an hour per IPv4 address, and the copier's Lambda shares its address.",
    )


class HyperPodSettings(Model):
    cluster_name: Optional[str] = Field(
        default=None,
        description="HyperPod cluster name; unset: `<prefix>-<env>-hp`. Changing it replaces the cluster.",
    )
    node_recovery: Literal["Automatic", "None"] = Field(
        default="Automatic", description="`Automatic` replaces or reboots faulty nodes; `None` leaves them."
    )
    continuous_provisioning: bool = Field(
        default=False, description="`NodeProvisioningMode: Continuous`: groups scale without waiting for all their nodes."
    )
    autoscaling: Literal["none", "karpenter"] = Field(
        default="none",
        description="`karpenter`: HyperPod's managed Karpenter scales the groups marked `autoscaled` (turns on continuous "
        "provisioning, creates the autoscaler role, applies a `HyperpodNodeClass` and a `NodePool`).",
    )
    tiered_storage_memory_percent: Optional[int] = Field(
        default=None, description="Managed tiered checkpointing: this share of each node's memory holds checkpoints (`TieredStorageConfig`); unset: off. "
        "HyperPod's checkpointless training is documented as incompatible with it (and with elastic training): `validate` says so.",
    )
    volume_encryption: Optional[VolumeEncryption] = Field(
        default=None,
        description="The nodes' EBS volumes under customer managed KMS keys (`VolumeKmsKeyId`; needs continuous provisioning; "
        "HyperPod's customer managed key page, smcluster-cmk); "
        "`{}`: one key per group made by the stack; unset: AWS-owned keys. A group's key cannot change later (HyperPod "
        "refuses it), so a new key means a new group.",
    )
    existing_lifecycle_bucket: Optional[str] = Field(
        default=None,
        description="A bucket of this account and region for the lifecycle scripts instead of one the cluster stack creates "
        "(as the quick setup's `S3BucketName`); the scripts go under `lifecycle/<digest>/`, which is all the nodes may read; SSE-S3 or "
        "`aws/s3` only (`preflight` checks).",
    )
    existing_execution_role_arn: Optional[str] = Field(
        default=None,
        description="A role of this account (a path allowed) for every instance group instead of one the hyperpod stack "
        "creates; used as it is, nothing attached; needs `existing_lifecycle_bucket`. `preflight` checks SageMaker's trust, "
        "`AmazonSageMakerClusterInstanceRolePolicy` and what the stack's own role is granted.",
    )

    @property
    def continuous(self) -> bool:
        """NodeProvisioningMode Continuous: asked for, or implied by Karpenter, which is built on it."""
        return self.continuous_provisioning or self.autoscaling == "karpenter"
    max_instances_per_group: int = Field(
        default=64, ge=1, le=10000, description="A ceiling on any one group's count, so a typo (400 for 4) cannot reach the quota call."
    )
    helm_chart: HelmChartSource = Field(
        description="Where `make hyperpod-chart` fetches the HyperPod dependencies chart from (docs/deploying.md, The dependencies "
        "chart).",
    )
    instance_groups: tuple[InstanceGroup, ...] = Field(
        min_length=1,
        description="One HyperPod instance group per entry; changing a group's name, type, execution role, threads per core or AZ "
        "replaces its nodes.",
    )


# HyperPod's own label and taint namespace: it sets and changes its nodes' health there
# (sagemaker.amazonaws.com/node-health-status, deep-health-check-status, fault-type and
# fault-reason: HyperPod's page "Resilience-related Kubernetes labels by SageMaker HyperPod"),
# and its taint of nodes under deep health checks; a group's own key there would be overwritten
# or would overwrite what schedulers and the health agent read.
HYPERPOD_NAMESPACE = "sagemaker.amazonaws.com/"
RESERVED_WORDS = f"is in HyperPod's own {HYPERPOD_NAMESPACE} namespace, where it keeps its nodes' health; choose another prefix"
# "The kubernetes.io/ and k8s.io/ prefixes are reserved for Kubernetes core components"
# (Kubernetes docs, Labels and Selectors, Syntax and character set; the same keys serve taints):
# node.kubernetes.io/not-ready, unreachable, unschedulable and the rest are set and cleared by the
# node lifecycle controller, node-role.kubernetes.io/ by cluster tooling.
KUBERNETES_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")
KUBERNETES_RESERVED_WORDS = (
    "has a prefix Kubernetes reserves for its core components (kubernetes.io/, k8s.io/ and their subdomains, such as "
    "node.kubernetes.io/, whose taints the node lifecycle controller sets and clears); choose a prefix of your own"
)


# A node's own labels in those domains are refused too: the kubelet takes only the kubelet.kubernetes.io/
# and node.kubernetes.io/ prefixes and a fixed set of well-known labels in --node-labels, and the
# NodeRestriction admission plugin refuses a node setting node-role.kubernetes.io/ (Kubernetes docs,
# kubelet command-line reference --node-labels; admission controllers, NodeRestriction).
KUBERNETES_RESERVED_LABEL_WORDS = (
    "has a prefix Kubernetes reserves (kubernetes.io/, k8s.io/ and their subdomains): a node may not label itself there "
    "(node-role.kubernetes.io/ above all: the NodeRestriction admission plugin refuses it; Kubernetes docs, kubelet "
    "--node-labels and admission controllers, NodeRestriction); choose a prefix of your own"
)


# "HyperPod checkpointless training is currently incompatible with HyperPod managed tiered
# checkpointing and elastic training" (AWS docs, sagemaker-eks-checkpointless-considerations).
CHECKPOINTLESS_SOURCE = "AWS docs page sagemaker-eks-checkpointless-considerations (seen 2026-12)"


def kubernetes_reserved(key: str) -> bool:
    """Whether a label or taint key's prefix is one Kubernetes reserves."""
    prefix = key.rpartition("/")[0] if "/" in key else ""
    return any(prefix == d or prefix.endswith("." + d) for d in KUBERNETES_RESERVED_DOMAINS)


def spec_efa(g: InstanceGroup) -> int | None:
    spec = catalogue.lookup(g.instance_type)
    return spec.efa_interfaces if spec else None


# Days in each month, February at its longest: a day no month of the schedule has never comes.
_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}
_MONTHS = {m: i for i, m in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1)}


def cron_never_fires(expression: str, this_year: int | None = None) -> str | None:
    """Why cron(minutes hours day-of-month month day-of-week year) can never fire, or None:
    a day of the month that none of its months has, or only years that have passed."""
    fields = expression[len("cron("):-1].split()
    if len(fields) != 6:
        return None
    _, _, dom, month, _, year = fields

    def values(field: str, names: dict) -> set[int] | None:
        if field in ("*", "?") or "/" in field or "L" in field or "W" in field or "#" in field:
            return None
        out = set()
        for part in field.split(","):
            low, _, high = part.partition("-")
            low, high = (names.get(low.upper(), low), names.get(high.upper(), high) if high else None)
            if not str(low).isdigit() or (high is not None and not str(high).isdigit()):
                return None
            out |= set(range(int(low), int(high if high is not None else low) + 1))
        return out

    days, months = values(dom, {}), values(month, _MONTHS)
    if days and months and all(d > _MONTH_DAYS.get(m, 31) for d in days for m in months):
        return f"day {min(days)} of month {','.join(map(str, sorted(months)))} does not exist"
    years = values(year, {}) if re.fullmatch(r"[\d,-]+", year) else None
    now = this_year or datetime.date.today().year
    if years and max(years) < now:
        return f"its last year, {max(years)}, has passed"
    return None
