"""Per-environment settings, the models: what each field holds and the check of each field on
its own.

`cdk.json` holds `defaults` and an `environments` map. The chosen environment's block is
deep-merged over `defaults` (mappings merge key by key, lists and scalars replace), then
parsed by these pydantic models. The rules that span fields read the models from the layer
above (infra/checks, infra/admission.py, infra/prerequisites.py), and validation
(infra/validation.py, `load_settings`) runs them: nothing here calls a rule. Every problem
becomes one line naming the field path, the value and what is allowed. Nothing below app.py
reads context: stacks get the `Settings` validation returns.

One module per area (network, eks, hyperpod, addons, governance, storage, sample_job,
acceptance, operations, delivery), the root `Settings` in settings, the limits the services' own
definitions put on fields in limits, what the areas share in base, loading (the merge, the
error text of a field's own check, the walk over every field) in loading, and the
configuration reference written from the models' descriptions in reference (`python -m
infra.config.reference`). This module is the models' public face: import them from
`infra.config`, and load settings from `infra.validation`.
"""

from infra.config.acceptance import AcceptanceSettings
from infra.config.addons import EKS_ADDON_NAMES, AddonsSettings, AddonSwitch, GrafanaSettings, ObservabilityAddon, ObservabilityMetrics
from infra.config.base import ConfigError
from infra.config.delivery import DeliverySettings, DeliverySource
from infra.config.eks import CORE_ADDON_NAMES, LOG_TYPES, CoreAddon, CoreAddons, EksSettings
from infra.config.governance import TOPOLOGY_LEVELS, GovernanceSettings, PriorityClass, QuotaResource, Team, TopologySettings
from infra.config.hyperpod import AutoPatch, HelmChartSource, HyperPodSettings, InstanceGroup, RollingBatch, ScheduledUpdate, Taint, VolumeEncryption
from infra.config.inference import INFERENCE_ADDON_NAME, EndpointSettings, InferenceSettings
from infra.config.loading import DEFAULT_ENV, context_from_cdk_cli, deep_merge, environment_names, field_paths, merged_environment, read_cdk_json
from infra.config.operations import Alerts, Notifications, OperationsSettings
from infra.config.network import ENDPOINT_SERVICES, ExistingVpc, HyperPodSubnet, NetworkSettings
from infra.config.sample_job import TRAINING_IMAGE_PLATFORM, DatasetSettings, SampleJobSettings
from infra.config.settings import ProtectionSettings, Settings
from infra.config.storage import FSX_THROUGHPUTS, ExistingFileSystem, FsxSettings

__all__ = [
    "AcceptanceSettings", "Alerts", "Notifications", "OperationsSettings",
    "CORE_ADDON_NAMES", "DEFAULT_ENV", "EKS_ADDON_NAMES", "ENDPOINT_SERVICES", "FSX_THROUGHPUTS", "LOG_TYPES", "TOPOLOGY_LEVELS",
    "AddonSwitch", "AddonsSettings", "ConfigError", "DeliverySettings", "DeliverySource", "CoreAddon", "CoreAddons",
    "DatasetSettings", "EksSettings", "EndpointSettings", "INFERENCE_ADDON_NAME", "InferenceSettings",
    "ExistingFileSystem", "ExistingVpc", "FsxSettings", "GovernanceSettings", "GrafanaSettings", "HelmChartSource",
    "HyperPodSettings", "HyperPodSubnet", "InstanceGroup", "NetworkSettings", "ObservabilityAddon",
    "ObservabilityMetrics", "PriorityClass", "ProtectionSettings", "QuotaResource", "RollingBatch", "SampleJobSettings",
    "ScheduledUpdate", "Settings", "TRAINING_IMAGE_PLATFORM", "Taint", "Team", "TopologySettings", "AutoPatch", "VolumeEncryption",
    "context_from_cdk_cli", "deep_merge", "environment_names", "field_paths",
    "merged_environment", "read_cdk_json",
]
