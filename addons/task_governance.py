"""HyperPod task governance (`amazon-sagemaker-hyperpod-taskgovernance`): installs Kueue
into kueue-system; the scheduler config and team quotas come after it."""

from __future__ import annotations

from addons.base import ManagedAddon, ReadyWhen


class TaskGovernanceAddon(ManagedAddon):
    key = "task_governance"
    title = "HyperPod task governance (Kueue)"
    eks_name = "amazon-sagemaker-hyperpod-taskgovernance"
    # The scheduler config and quotas become Kueue objects, admitted by Kueue's webhook
    # (served by this deployment; the awsome Terraform waits for the same).
    ready_when = ReadyWhen.deployment_available("kueue-system", "kueue-controller-manager")
