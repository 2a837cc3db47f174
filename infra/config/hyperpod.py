"""The HyperPod cluster: instance groups and their options, autoscaling, the dependencies chart."""

from __future__ import annotations

import datetime
import difflib
import re
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field

from infra import catalogue, cfn_schema, hyperpod_chart, naming, timing
from infra.config.base import LABEL_VALUE_WORDS, QUALIFIED_NAME_WORDS, Model, Problems, duplicates, k8s_qualified_name

if TYPE_CHECKING:
    from infra.config.settings import Settings


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
        "patching\" page).",
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
        default=None, description="Managed tiered checkpointing: this share of each node's memory holds checkpoints (`TieredStorageConfig`); unset: off."
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


def kubernetes_reserved(key: str) -> bool:
    """Whether a label or taint key's prefix is one Kubernetes reserves."""
    prefix = key.rpartition("/")[0] if "/" in key else ""
    return any(prefix == d or prefix.endswith("." + d) for d in KUBERNETES_RESERVED_DOMAINS)


def check_instance_groups(s: Settings, p: Problems):
    groups = s.hyperpod.instance_groups
    hp_azs = {sn.availability_zone for sn in s.network.hyperpod_subnets}
    for name in duplicates(g.name for g in groups):
        p.error("hyperpod.instance_groups", name, "is used by two groups; group names must be unique")
    for i, g in enumerate(groups):
        path = f"hyperpod.instance_groups[{i}]"
        if not naming.SAGEMAKER_NAME.match(g.name):
            p.error(f"{path}.name", g.name, "must be 1-63 letters, digits and hyphens, starting and ending alphanumeric")
        spec = catalogue.lookup(g.instance_type)
        if spec is None:
            near = difflib.get_close_matches(g.instance_type, list(catalogue.CATALOGUE), n=3, cutoff=0.6)
            p.error(
                f"{path}.instance_type", g.instance_type,
                f"is not a type SageMaker HyperPod takes ({catalogue.TYPES_SOURCE}, {len(catalogue.CATALOGUE)} types)"
                + (f"; did you mean {', '.join(near)}?" if near else ""),
            )
        elif spec.unknown:
            # Accepted: SageMaker takes it. What is sized from its figures cannot be checked.
            p.warn(
                f"{path}.instance_type: {g.instance_type}'s {', '.join(spec.unknown)} are in no source here ({spec.source}); "
                "quotas by them, the observability size, subnet sizing and the chart's device plugins cannot be checked or "
                "derived for it (set hyperpod.helm_chart.values to switch a device plugin on)"
            )
            if g.autoscaled:
                p.error(f"{path}.autoscaled", True, f"sizes Karpenter's NodePool limits from {g.instance_type}'s {', '.join(spec.unknown)}, which no source here states")
        ceiling = s.hyperpod.max_instances_per_group
        if g.autoscaled:
            if g.count != 0:  # "If you start with more than 0 nodes, Karpenter will scale them down to 0"
                p.error(f"{path}.count", g.count, "must be 0 for an autoscaled group: Karpenter starts it at 0 and adds nodes for pending pods")
            if g.max_count is None or not 1 <= g.max_count <= ceiling:
                p.error(f"{path}.max_count", g.max_count, f"must be 1 to {ceiling} for an autoscaled group (the NodePool's limit)")
        elif not 1 <= g.count <= ceiling:
            p.error(f"{path}.count", g.count, f"must be 1 to {ceiling} (hyperpod.max_instances_per_group)")
        elif g.max_count is not None:
            p.error(f"{path}.max_count", g.max_count, "applies only with autoscaled: true")
        if spec is not None and g.deep_health_checks and not spec.deep_health_checks:
            p.error(
                f"{path}.deep_health_checks",
                list(g.deep_health_checks),
                f"are not supported on {g.instance_type}; deep health checks run on accelerated p/trn types only",
            )
        if g.availability_zone is not None and g.availability_zone not in hp_azs:
            p.error(f"{path}.availability_zone", g.availability_zone, f"has no HyperPod subnet; subnets exist in: {', '.join(sorted(hp_azs))}")
        taint = cfn_schema.definition("AWS::SageMaker::Cluster", "ClusterKubernetesTaint")["properties"]
        for j, t in enumerate(g.taints):
            if t.key.startswith(HYPERPOD_NAMESPACE):
                p.error(f"{path}.taints[{j}].key", t.key, RESERVED_WORDS)
            elif kubernetes_reserved(t.key):
                p.error(f"{path}.taints[{j}].key", t.key, KUBERNETES_RESERVED_WORDS)
            elif not k8s_qualified_name(t.key, taint["Key"]):
                p.error(f"{path}.taints[{j}].key", t.key, QUALIFIED_NAME_WORDS)
            if t.value is not None and not cfn_schema.matches(taint["Value"], t.value):
                p.error(f"{path}.taints[{j}].value", t.value, LABEL_VALUE_WORDS)
        # Kubernetes label keys and values follow the same rules as taint keys and values
        # (HyperPod's schema spells those out; its Labels map does not).
        for key, value in g.labels.items():
            if key.startswith(HYPERPOD_NAMESPACE):
                p.error(f"{path}.labels", key, RESERVED_WORDS)
            elif not k8s_qualified_name(key, taint["Key"]):
                p.error(f"{path}.labels", key, QUALIFIED_NAME_WORDS)
            elif value and not cfn_schema.matches(taint["Value"], value):
                p.error(f"{path}.labels.{key}", value, LABEL_VALUE_WORDS)
        _check_group_options(s, g, path, p)
        if g.training_plan_arn:
            plan_partition, _, plan_region, plan_account = g.training_plan_arn.split(":")[1:5]
            if (plan_partition, plan_region, plan_account) != (naming.partition(s.region), s.region, s.account):
                p.error(
                    f"{path}.training_plan_arn",
                    g.training_plan_arn,
                    f"is in {plan_region}/{plan_account}; a training plan serves clusters of its own region and account ({s.region}/{s.account})",
                )


def _check_group_options(s: Settings, g: InstanceGroup, path: str, p: Problems) -> None:
    """The AWS::SageMaker::Cluster options beyond type and count, against the schema's own rules."""
    if g.min_count is not None and not 0 <= g.min_count <= g.count:
        p.error(f"{path}.min_count", g.min_count, f"must be 0 to count ({g.count})")
    if g.image_id is not None and not cfn_schema.matches(cfn_schema.definition("AWS::SageMaker::Cluster", "ImageId"), g.image_id):
        p.error(f"{path}.image_id", g.image_id, "must be an AMI id like ami-0123456789abcdef0")
    if g.network_interface and spec_efa(g) == 0:
        p.error(f"{path}.network_interface", g.network_interface, f"needs EFA, which {g.instance_type} does not have")
    for key, effect in duplicates((t.key, t.effect) for t in g.taints):
        # Kubernetes validation: taints must be unique by key and effect.
        p.error(f"{path}.taints", f"{key}:{effect}", "is given twice; a node takes one taint per key and effect")
    if g.capacity == "spot" and g.training_plan_arn:
        p.error(f"{path}.capacity", "spot", "cannot use a training plan (reserved capacity); drop one of them")
    spec = catalogue.lookup(g.instance_type)
    limit = cfn_schema.definition("AWS::SageMaker::Cluster", "InstanceRequirements")["properties"]["InstanceTypes"]["maxItems"]
    if len(g.alternative_instance_types) + 1 > limit:
        p.error(f"{path}.alternative_instance_types", list(g.alternative_instance_types), f"with instance_type makes more than {limit} types")
    for j, other in enumerate(g.alternative_instance_types):
        alt = catalogue.lookup(other)
        where = f"{path}.alternative_instance_types[{j}]"
        if alt is None:
            p.error(where, other, "is not a known HyperPod type")
        elif other == g.instance_type or other in g.alternative_instance_types[:j]:
            p.error(where, other, "is listed twice")
        elif alt.unknown or (spec is not None and spec.unknown):
            p.warn(f"{where}: {other} and {g.instance_type} cannot be compared ({', '.join(alt.unknown or spec.unknown)} in no source here); a job sized for one must fit the other")
        elif spec is not None and (alt.accelerators, alt.accelerator_resource) != (spec.accelerators, spec.accelerator_resource):
            p.error(where, other, f"has {alt.accelerators} x {alt.accelerator_resource}, {g.instance_type} {spec.accelerators}: a job sized for one must fit the other")
    if g.mig_profile is not None and spec is not None:
        _check_mig(g, spec, path, p)
    if g.scheduled_update is not None:
        update = g.scheduled_update
        rule = cfn_schema.definition("AWS::SageMaker::Cluster", "ScheduledUpdateConfig")["properties"]["ScheduleExpression"]
        never = cron_never_fires(update.schedule) if cfn_schema.matches(rule, update.schedule) else None
        if never:
            p.error(f"{path}.scheduled_update.schedule", update.schedule, f"never fires: {never}")
        if not cfn_schema.matches(rule, update.schedule):
            p.error(f"{path}.scheduled_update.schedule", update.schedule, "must be cron(minutes hours day-of-month month day-of-week year), e.g. cron(0 3 ? * SUN *)")
    for field, deployment in (("scheduled_update", g.scheduled_update), ("auto_patch", g.auto_patch)):
        for name, batch in (("batch", deployment and deployment.batch), ("rollback_batch", deployment and deployment.rollback_batch)):
            if batch is not None and batch.unit == "percent" and batch.value > 100:
                p.error(f"{path}.{field}.{name}.value", batch.value, "must be 1 to 100 percent")
    if g.image_release_version is not None and g.image_id is not None:
        # ImageId names an AMI outright; ImageReleaseVersion a release of HyperPod's own AMI.
        p.error(f"{path}.image_release_version", g.image_release_version, "cannot be given with image_id (a custom AMI); give one of them")
    if g.auto_patch is not None and g.scheduled_update is not None:
        # HyperPod's AMI update page: "If schedules overlap, updates might fail."
        p.warn(
            f"{path}.auto_patch: the group also has scheduled_update; both roll AMI updates through it, and HyperPod's "
            "AMI update page warns that overlapping updates might fail"
        )
    if g.autoscaled:
        # HyperPod's NodeClass page: groups with deep health checks or a training plan are not supported.
        if g.deep_health_checks:
            p.error(f"{path}.deep_health_checks", list(g.deep_health_checks), "are not supported on an autoscaled group (they take 60-90 minutes while pods wait)")
        if g.training_plan_arn:
            p.error(f"{path}.training_plan_arn", g.training_plan_arn, "is not supported on an autoscaled group (On-Demand or Spot only)")


def _check_mig(g: InstanceGroup, spec: catalogue.InstanceType, path: str, p: Problems) -> None:
    """A MIG configuration the chart's operator knows, whose slices this group's GPU offers."""
    where = f"{path}.mig_profile"
    offered = spec.mig_profiles
    if not offered:
        gpus = sorted({t.accelerator for t in catalogue.CATALOGUE.values() if t.mig_profiles})
        p.error(where, g.mig_profile, f"but {g.instance_type} ({spec.accelerator or 'no GPU'}) has no MIG; MIG runs on {', '.join(gpus)}")
        return
    fitting = sorted(n for n, d in hyperpod_chart.MIG_CONFIGS.items() if d and all(offered.get(k, 0) >= c for k, c in d.items()))
    devices = hyperpod_chart.MIG_CONFIGS.get(g.mig_profile)
    if not devices:
        allowed = ", ".join(fitting) or "none: the chart has no configuration for it"
        p.error(where, g.mig_profile, f"is not a MIG configuration of the chart's GPU operator for {spec.accelerator}; allowed: {allowed}")
    elif not all(offered.get(k, 0) >= c for k, c in devices.items()):
        slices = ", ".join(f"{k} x{c}" for k, c in devices.items())
        p.error(where, g.mig_profile, f"cuts each GPU into {slices}, which {spec.accelerator} does not offer; allowed: {', '.join(fitting)}")
    if g.alternative_instance_types:
        # HyperPod's GPU partitioning page: not with flexible instance groups.
        p.error(where, g.mig_profile, "is not supported on a group with alternative_instance_types (a flexible instance group); give it one type")
    if "nvidia.com/mig.config" in g.labels:
        p.error(f"{path}.labels", "nvidia.com/mig.config", "is set from mig_profile; give the configuration there")


def check_volume_encryption(s: Settings, p: Problems) -> None:
    """What HyperPod's customer managed key page (smcluster-cmk) requires of the cluster and the key."""
    enc = s.hyperpod.volume_encryption
    if enc is None:
        return  # that it needs continuous provisioning: infra/prerequisites.py
    arn = enc.kms_key_arn
    if arn is not None:
        found = re.fullmatch(r"arn:(aws[a-z-]*):kms:([a-z0-9-]+):(\d{12}):key/[a-zA-Z0-9-]+", arn)
        if found is None:
            p.error("hyperpod.volume_encryption.kms_key_arn", arn, "must be a KMS key ARN, arn:aws:kms:<region>:<account>:key/<key-id> (not an alias)")
        elif found[1] != naming.partition(s.region):
            p.error("hyperpod.volume_encryption.kms_key_arn", arn,
                    f"is a key of partition {found[1]}; {s.region} is in partition {naming.partition(s.region)}, whose EBS takes only its own keys")
        elif found[2] != s.region:
            p.error("hyperpod.volume_encryption.kms_key_arn", arn, f"is in {found[2]}; EBS volumes in {s.region} take a key of that region")


def check_existing_execution_role(s: Settings, p: Problems) -> None:
    """A role of the deploying account and partition (instance groups' ExecutionRole is passed
    to SageMaker, which takes only roles of the cluster's account), and a bucket it can read."""
    from infra.config.eks import check_own_role

    arn = s.hyperpod.existing_execution_role_arn
    if arn is None:
        return
    # That it needs a lifecycle bucket it can read: infra/prerequisites.py.
    check_own_role(s, p, "hyperpod.existing_execution_role_arn", arn, "each of HyperPod's nodes")


def check_autoscaling(s: Settings, p: Problems) -> None:
    """What Karpenter needs beside it is in infra/prerequisites.py; here, how many groups it takes."""
    scaled = [g.name for g in s.hyperpod.instance_groups if g.autoscaled]
    if s.hyperpod.autoscaling == "karpenter" and len(scaled) > 10:  # HyperPod's NodeClass page: up to 10 instance groups
        p.error("hyperpod.instance_groups", scaled, "more than 10 autoscaled groups; a HyperpodNodeClass names at most 10")


def check_chart(s: Settings, p: Problems):
    """What the dependencies chart can and cannot pull where its images are copied into ECR."""
    source = s.hyperpod.helm_chart
    mig = [g.name for g in s.hyperpod.instance_groups if g.mig_profile]
    if mig and s.region not in hyperpod_chart.GPU_OPERATOR_ACCOUNTS:
        p.error("hyperpod.instance_groups", mig, f"use MIG, but the chart's GPU operator has no images for {s.region}; regions: {', '.join(sorted(hyperpod_chart.GPU_OPERATOR_ACCOUNTS))}")
    if not s.mirrors_chart_images:
        return
    why = "copied into ECR (no NAT)" if source.mirror_images is None else "copied into ECR (mirror_images)"
    if not source.docker_hub_secret:
        # Our own values never switch the chart's operators off: only yours can (hyperpod.helm_chart.values).
        rendered = hyperpod_chart.rendered_images(source.values, s.region)
        for registry, limit in hyperpod_chart.ANONYMOUS_PULL_LIMITS.items():
            images = [i for i in hyperpod_chart.CHART_IMAGES if i.subchart in rendered and i.source.startswith(registry)]
            if images:
                p.error(
                    "hyperpod.helm_chart.docker_hub_secret",
                    None,
                    f"is required while the chart's images are {why}: {', '.join(i.source for i in images)} would be pulled "
                    f"without credentials, and {limit}; a refused pull fails the cluster stack, whose rollback deletes the "
                    "control plane. Name a Secrets Manager secret holding Docker Hub credentials (or switch those subcharts "
                    f"off in hyperpod.helm_chart.values: {', '.join(i.condition + ': false' for i in images)}; acceptance's "
                    "NCCL test is an MPIJob)",
                )
    for image in hyperpod_chart.CHART_IMAGES:
        if image.keys or image.serves not in s.device_resources:
            continue
        groups = [g.name for g in s.hyperpod.instance_groups if catalogue.figures(g.instance_type) and image.serves in g.device_resources]
        p.error(
            "hyperpod.instance_groups",
            groups,
            f"need the chart's {image.subchart}, whose image {image.source} is written into its template ({image.where}) "
            f"and cannot be pointed at a copy while the chart's images are {why}; give the network a NAT gateway",
        )


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
