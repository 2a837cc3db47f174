"""The EKS add-ons that make HyperPod a training platform, and observability's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field

from infra import catalogue, prerequisites, versions
from infra.config.base import Model, Problems

if TYPE_CHECKING:
    from infra.config.settings import Settings


# Each block under `addons` -> the EKS add-on it installs (addons/*.py build them by these names).
EKS_ADDON_NAMES = {
    "cert_manager": "cert-manager",
    "training_operator": "amazon-sagemaker-hyperpod-training-operator",
    "observability": "amazon-sagemaker-hyperpod-observability",
    "task_governance": "amazon-sagemaker-hyperpod-taskgovernance",
    "fsx_csi": "aws-fsx-csi-driver",
}


class AddonSwitch(Model):
    enabled: bool = Field(default=True, description="Install the add-on.")
    existing: bool = Field(
        default=False,
        description="The existing cluster (`eks.existing_cluster`) already runs it: the deploy creates none, and what needs "
        "it uses that one; `preflight` checks it is there at a version they accept. Its `version` and "
        "`configuration_values` stay its owner's.",
    )
    version: Optional[str] = Field(
        default=None, pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$",
        description="Pinned EKS add-on version; unset: EKS's default at create time.",
    )
    configuration_values: dict[str, Any] = Field(default={}, description="Extra add-on configuration values, merged over ours.")


MetricLevel = Literal["BASIC", "ADVANCED"]


class ObservabilityMetrics(Model):
    training: MetricLevel = Field(default="BASIC", description="Training metrics.")
    inference: MetricLevel = Field(default="BASIC", description="Inference metrics (both references send `BASIC`).")
    task_governance: MetricLevel = Field(default="BASIC", description="Task governance (Kueue) metrics.")
    scaling: MetricLevel = Field(default="BASIC", description="Scaling metrics.")
    cluster: MetricLevel = Field(default="BASIC", description="Cluster metrics, sent as `customMetrics` as the awsome Terraform does.")
    node: MetricLevel = Field(default="BASIC", description="Node metrics.")
    network: MetricLevel = Field(default="BASIC", description="Network metrics.")
    accelerated_compute: MetricLevel = Field(default="ADVANCED", description="Accelerated compute metrics.")


class GrafanaSettings(Model):
    """Amazon Managed Grafana: AWS_SSO needs IAM Identity Center enabled in the account;
    SAML needs the identity provider's metadata URL. Users and groups are assigned after
    deploy (CloudFormation has no resource for Grafana permissions)."""

    enabled: bool = Field(default=False, description="Create an Amazon Managed Grafana workspace for the add-on.")
    authentication_providers: tuple[Literal["AWS_SSO", "SAML"], ...] = Field(
        default=("AWS_SSO",), min_length=1, description="`AWS_SSO` needs IAM Identity Center in the account; `SAML` needs `saml_metadata_url`."
    )
    saml_metadata_url: Optional[str] = Field(
        default=None, pattern=r"^https://\S+$", description="The identity provider's metadata URL, with `SAML`."
    )


class ObservabilityAddon(AddonSwitch):
    scrape_interval_seconds: int = Field(default=30, ge=10, le=300, description="Metric scrape interval.")
    metrics: ObservabilityMetrics = Field(
        default=ObservabilityMetrics(),
        description="How much of each of the add-on's metric sets it collects.",
    )
    logging: bool = Field(default=True, description="Ship the cluster's logs to CloudWatch Logs.")
    grafana: GrafanaSettings = Field(
        default=GrafanaSettings(),
        description="Amazon Managed Grafana beside the Prometheus workspace; its users and groups are assigned after deploy "
        "(CloudFormation has no resource for Grafana permissions).",
    )


class AddonsSettings(Model):
    cert_manager: AddonSwitch = Field(
        default=AddonSwitch(), description="`cert-manager`: certificates for the operators' webhooks (one replica each, tolerating every taint)."
    )
    training_operator: AddonSwitch = Field(
        default=AddonSwitch(),
        description="`amazon-sagemaker-hyperpod-training-operator`: `HyperPodPyTorchJob`, log-based hang and fault detection, "
        "partial restarts; needs cert-manager and the Pod Identity agent, comes after task governance.",
    )
    observability: ObservabilityAddon = Field(
        default=ObservabilityAddon(),
        description="`amazon-sagemaker-hyperpod-observability`: metrics to Managed Prometheus (encrypted, tagged), cluster logs, "
        "optional Managed Grafana; needs the Pod Identity agent.",
    )
    task_governance: AddonSwitch = Field(
        default=AddonSwitch(), description="`amazon-sagemaker-hyperpod-taskgovernance`: Kueue, the team queues and quotas."
    )
    fsx_csi: AddonSwitch = Field(
        default=AddonSwitch(),
        description="The FSx for Lustre CSI driver (`aws-fsx-csi-driver`), installed only where `fsx.enabled`; with `existing`, "
        "the claims use the cluster's driver.",
    )


def check_addons(s: Settings, p: Problems):
    # What observability and Grafana need beside them (a 4xlarge node, the workspace, SAML's
    # metadata): infra/prerequisites.py.
    a = s.addons
    if a.observability.enabled:
        unsized = [g.name for g in s.hyperpod.instance_groups if catalogue.lookup(g.instance_type) and g.spec.vcpus is None]
        if unsized and not prerequisites.observability_node(s):
            p.warn(
                f"addons.observability.enabled: its collectors need a node of 4xlarge (16 vCPUs) or larger, and the vCPUs "
                f"of group(s) {', '.join(unsized)} are in no source here; this cannot be checked"
            )
        grafana = a.observability.grafana
        if grafana.enabled and "AWS_SSO" in grafana.authentication_providers:
            p.warn(
                "addons.observability.grafana.authentication_providers: AWS_SSO needs IAM Identity Center enabled in "
                f"{s.region} for this account (an organization instance); without it the Grafana workspace fails to create"
            )
    for key in AddonsSettings.model_fields:
        _check_existing(s, key, getattr(a, key), p)
    for path, name, pinned in s.addon_pins:
        for off in versions.pins_off_version(s.eks.version, {name: pinned}):
            if off.known:
                p.error(path, pinned, off.reason)
            else:
                p.warn(f"{path}: {pinned} {off.reason}")
    for floor in version_floors(s):
        pinned = getattr(a, floor.key).version
        if pinned and not versions.addon_version_at_least(pinned, floor.minimum):
            p.error(f"addons.{floor.key}.version", pinned, f"is older than {floor.minimum}, which {floor.needed_by} needs; use it or newer")
    unpinned = [path for path, switch in tenancy_addons(s) if switch.version is None]
    if unpinned and s.governance.teams and s.protection.termination_protection:
        p.warn(
            f"{', '.join(f'{u}.version' for u in unpinned)}: unset, so each new environment gets EKS's default of the day of "
            "what keeps its teams apart; pin them: hyperpod-cdk upgrade-plan --to "
            f"{s.eks.version} -c env={s.env_name} --from-account --write-pins"
        )


def tenancy_addons(s: Settings) -> list[tuple[str, "AddonSwitch"]]:
    """(config path, switch) of each add-on this deploy installs that tenancy rests on: the VPC
    CNI (its network policy agent), the Pod Identity agent (the jobs' roles, not the node's),
    task governance (Kueue and its webhook: the queues) and observability (its collectors reach
    into team namespaces)."""
    core = [(f"eks.core_addons.{k}", getattr(s.eks.core_addons, k)) for k in ("vpc_cni", "pod_identity_agent")
            if k in s.core_addons_installed]
    return core + [(f"addons.{k}", getattr(s.addons, k)) for k in ("task_governance", "observability")
                   if getattr(s.addons, k).enabled and not getattr(s.addons, k).existing]


def _check_existing(s: Settings, key: str, switch: AddonSwitch, p: Problems) -> None:
    """`existing: true` says the cluster runs the add-on: only on a cluster this project joins,
    only with the add-on on, and with nothing that would configure it (its owner does)."""
    if not switch.existing:
        return
    where = f"addons.{key}.existing"
    if s.eks.existing_cluster is None:
        p.error(where, True, "applies only with eks.existing_cluster: a cluster this project creates runs none of its own add-ons")
    elif not switch.enabled:
        p.error(where, True, f"says the cluster runs it, so the deploy uses it; leave addons.{key}.enabled on (or existing out)")
    for field in sorted(switch.model_fields_set - {"enabled", "existing"}):
        p.error(f"addons.{key}.{field}", getattr(switch, field) if not isinstance(getattr(switch, field), Model) else getattr(switch, field).model_dump(exclude_unset=True),
                "configures an add-on the cluster's owner runs (existing: true); leave it out")


@dataclass(frozen=True)
class VersionFloor:
    """The oldest version of an add-on that something this config turns on accepts."""

    key: str  # the add-on's block under `addons`
    minimum: str
    needed_by: str
    source: str


def version_floors(s: Settings) -> list[VersionFloor]:
    """Every floor on the add-ons' versions this config sets, one model for what a pin may be
    (validation) and for what a running add-on must be (preflight, on a cluster that has it)."""
    a, out = s.addons, []
    if a.task_governance.enabled and a.training_operator.enabled:
        out.append(VersionFloor("task_governance", versions.TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR, "the training operator",
                                "AWS docs page sagemaker-eks-operator-troubleshooting, incompatible task governance version"))
    if a.task_governance.enabled and s.topology.mode != "none":
        out.append(VersionFloor("task_governance", versions.TASK_GOVERNANCE_MIN_FOR_TOPOLOGY, f"topology-aware scheduling (topology.mode {s.topology.mode})",
                                "HyperPod's topology-aware scheduling docs: task governance v1.2.2 or later (FACTS, add-ons and their order)"))
    if a.training_operator.enabled and s.sample_job.enabled and s.sample_job.max_nodes is not None:
        out.append(VersionFloor("training_operator", versions.TRAINING_OPERATOR_MIN_FOR_ELASTIC, "elastic training (sample_job.max_nodes)",
                                "AWS docs, Using elastic training in Amazon SageMaker HyperPod"))
    return out
