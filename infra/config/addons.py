"""The EKS add-ons that make HyperPod a training platform, and observability's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import Field

from infra.config.base import Model


# Each block under `addons` -> the EKS add-on it installs (addons/*.py build them by these names).
EKS_ADDON_NAMES = {
    "cert_manager": "cert-manager",
    "training_operator": "amazon-sagemaker-hyperpod-training-operator",
    "observability": "amazon-sagemaker-hyperpod-observability",
    "task_governance": "amazon-sagemaker-hyperpod-taskgovernance",
    "fsx_csi": "aws-fsx-csi-driver",
    "s3_csi": "aws-mountpoint-s3-csi-driver",
    "metrics_server": "metrics-server",
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
        description="The FSx for Lustre CSI driver (`aws-fsx-csi-driver`), installed only where `fsx.enabled` or `inference.enabled` "
        "(the inference operator refuses to install without it); with `existing`, the claims use the cluster's driver.",
    )
    s3_csi: AddonSwitch = Field(
        default=AddonSwitch(),
        description="The Mountpoint for Amazon S3 CSI driver (`aws-mountpoint-s3-csi-driver`), installed only where "
        "`inference.enabled`: the operator mounts a model from S3 through it, and refuses to install without it.",
    )
    metrics_server: AddonSwitch = Field(
        default=AddonSwitch(),
        description="`metrics-server` (tolerating every taint), installed only where `inference.enabled`: the operator's autoscaling "
        "reads pod metrics from it, and the quick setup installs it beside the operator.",
    )


@dataclass(frozen=True)
class VersionFloor:
    """The oldest version of an add-on that something this config turns on accepts."""

    key: str  # the add-on's block under `addons`
    minimum: str
    needed_by: str
    source: str
