"""HyperPod task governance (`amazon-sagemaker-hyperpod-taskgovernance`): installs Kueue
into kueue-system; the scheduler config and team quotas come after it."""

from __future__ import annotations

from addons.base import ManagedAddon
from addons.core_dns import CoreDnsAddon


class TaskGovernanceAddon(ManagedAddon):
    key = "task_governance"
    title = "HyperPod task governance (Kueue)"
    eks_name = "amazon-sagemaker-hyperpod-taskgovernance"
    after = (CoreDnsAddon,)
