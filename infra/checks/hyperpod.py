"""The HyperPod cluster's rules that span fields: instance groups against the region, the
catalogue and each other, their options, volume encryption, an existing execution role,
autoscaling and the dependencies chart."""

from __future__ import annotations

import difflib
import re

from infra import catalogue, cfn_schema, hyperpod_chart, naming
from infra.config.base import LABEL_VALUE_WORDS, QUALIFIED_NAME_WORDS, Problems, duplicates, k8s_qualified_name
from infra.config.hyperpod import (
    CHECKPOINTLESS_SOURCE, HYPERPOD_NAMESPACE, auto_patch_effect, KUBERNETES_RESERVED_LABEL_WORDS, KUBERNETES_RESERVED_WORDS, RESERVED_WORDS, InstanceGroup, cron_never_fires,
    kubernetes_reserved, spec_efa,
)
from infra.config.settings import Settings


def check_instance_groups(s: Settings, p: Problems):
    groups = s.hyperpod.instance_groups
    if s.hyperpod.tiered_storage_memory_percent is not None:
        p.warn(
            f"hyperpod.tiered_storage_memory_percent: managed tiered checkpointing is on, so HyperPod's checkpointless training "
            f"(its recipes' in-process recovery) cannot run on this cluster, nor in an elastic job: it is documented as "
            f"incompatible with both (source: {CHECKPOINTLESS_SOURCE})"
        )
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
            elif kubernetes_reserved(key):
                p.error(f"{path}.labels", key, KUBERNETES_RESERVED_LABEL_WORDS)
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
            _check_training_plan_name(g.training_plan_arn, f"{path}.training_plan_arn", p)


def _check_training_plan_name(arn: str, where: str, p: Problems) -> None:
    """The name in a training plan's ARN is one CreateTrainingPlan could have made: botocore's sagemaker
    model, TrainingPlanName (its pattern and length); the ARN's own pattern takes any name."""
    from infra.config import limits

    name = arn.partition(":training-plan/")[2]
    if not name:
        return  # the ARN's own pattern (limits: TrainingPlanArn) says what is wrong
    broken = limits.violation(name, limits.constraints(limits.Api("sagemaker", "TrainingPlanName")))
    if broken:
        p.error(where, arn, f"names training plan {name!r}, which {broken} (SageMaker API, TrainingPlanName): no such plan can exist")


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
    if g.auto_patch is not None:
        spec = catalogue.lookup(g.instance_type)
        p.warn(f"{path}.auto_patch: {auto_patch_effect(g.auto_patch.strategy, g.count, spec.accelerators if spec else None)}")
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
    from infra.checks.eks import check_own_role

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
