"""The EKS add-ons that make HyperPod a training platform, and observability's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field

from infra import versions
from infra.config.base import Model, Problems

if TYPE_CHECKING:
    from infra.config.settings import Settings


class AddonSwitch(Model):
    enabled: bool = True
    # Pinned EKS add-on version; None lets EKS choose its default at create time.
    version: Optional[str] = Field(default=None, pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
    configuration_values: dict[str, Any] = {}


MetricLevel = Literal["BASIC", "ADVANCED"]


class ObservabilityMetrics(Model):
    training: MetricLevel = "BASIC"
    inference: MetricLevel = "BASIC"
    task_governance: MetricLevel = "BASIC"
    scaling: MetricLevel = "BASIC"
    cluster: MetricLevel = "BASIC"
    node: MetricLevel = "BASIC"
    network: MetricLevel = "BASIC"
    accelerated_compute: MetricLevel = "ADVANCED"


class GrafanaSettings(Model):
    """Amazon Managed Grafana: AWS_SSO needs IAM Identity Center enabled in the account;
    SAML needs the identity provider's metadata URL. Users and groups are assigned after
    deploy (CloudFormation has no resource for Grafana permissions)."""

    enabled: bool = False
    authentication_providers: tuple[Literal["AWS_SSO", "SAML"], ...] = Field(default=("AWS_SSO",), min_length=1)
    saml_metadata_url: Optional[str] = Field(default=None, pattern=r"^https://\S+$")


class ObservabilityAddon(AddonSwitch):
    scrape_interval_seconds: int = Field(default=30, ge=10, le=300)
    metrics: ObservabilityMetrics = ObservabilityMetrics()
    logging: bool = True
    grafana: GrafanaSettings = GrafanaSettings()


class AddonsSettings(Model):
    cert_manager: AddonSwitch = AddonSwitch()
    training_operator: AddonSwitch = AddonSwitch()
    observability: ObservabilityAddon = ObservabilityAddon()
    task_governance: AddonSwitch = AddonSwitch()
    # The FSx for Lustre CSI driver: installed only where fsx.enabled (its version and values here).
    fsx_csi: AddonSwitch = AddonSwitch()


def check_addons(s: Settings, p: Problems):
    # What observability and Grafana need beside them (a 4xlarge node, the workspace, SAML's
    # metadata): infra/prerequisites.py.
    a = s.addons
    grafana = a.observability.grafana
    if a.observability.enabled and grafana.enabled and "AWS_SSO" in grafana.authentication_providers:
        p.warn(
            "addons.observability.grafana.authentication_providers: AWS_SSO needs IAM Identity Center enabled in "
            f"{s.region} for this account (an organization instance); without it the Grafana workspace fails to create"
        )
    tg, to = a.task_governance, a.training_operator
    if tg.enabled and to.enabled and tg.version and not versions.addon_version_at_least(
        tg.version, versions.TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR
    ):
        p.error(
            "addons.task_governance.version",
            tg.version,
            f"is refused by the training operator; use {versions.TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR} or newer",
        )
    if s.topology.mode != "none" and tg.enabled and tg.version and not versions.addon_version_at_least(
        tg.version, versions.TASK_GOVERNANCE_MIN_FOR_TOPOLOGY
    ):
        p.error(
            "addons.task_governance.version",
            tg.version,
            f"is too old for topology-aware scheduling; use {versions.TASK_GOVERNANCE_MIN_FOR_TOPOLOGY} or newer",
        )
