"""The one contract every add-on honours, and the pieces two or more of them share.

An add-on has a `key` (its block under `addons` in config), the add-ons it `requires`
(a missing one is a config error), the ones it must merely come `after` when they are on,
and a `build` that puts it into the addons stack and returns the construct others wait
for. `addons.registry.plan` orders the enabled ones; the stack wires the dependencies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import IConstruct

from infra.config import AddonSwitch, Settings, deep_merge


@dataclass(frozen=True)
class AddonContext:
    """What an add-on may build against."""

    scope: cdk.Stack
    settings: Settings
    cluster: eks.ICluster
    # The cluster stack's own Pod Identity agent: reused, never installed twice.
    pod_identity_agent: IConstruct


class Addon(ABC):
    key: ClassVar[str]
    title: ClassVar[str]
    requires: ClassVar[tuple[type["Addon"], ...]] = ()
    after: ClassVar[tuple[type["Addon"], ...]] = ()
    # Core add-ons every cluster has: configured under eks.core_addons, never switched off.
    core: ClassVar[bool] = False

    def __init__(self, settings: Settings):
        self.settings = settings

    @property
    def config(self) -> AddonSwitch:
        section = self.settings.eks.core_addons if self.core else self.settings.addons
        return getattr(section, self.key)

    @property
    def enabled(self) -> bool:
        return self.core or self.config.enabled

    @abstractmethod
    def build(self, ctx: AddonContext) -> IConstruct:
        """Build into ctx.scope; return the construct that dependents must wait for."""


class ManagedAddon(Addon):
    """An EKS add-on by name, with the config's pinned version and extra values merged
    over the ones the add-on computes."""

    eks_name: ClassVar[str]

    def configuration(self, ctx: AddonContext) -> dict:
        return {}

    def prerequisites(self, ctx: AddonContext) -> list[IConstruct]:
        """Resources the add-on itself must be created after (its Pod Identity association)."""
        return []

    def build(self, ctx: AddonContext) -> eks.Addon:
        prerequisites = self.prerequisites(ctx)
        values = deep_merge(self.configuration(ctx), self.config.configuration_values)
        addon = eks.Addon(
            ctx.scope,
            type(self).__name__,
            cluster=ctx.cluster,
            addon_name=self.eks_name,
            addon_version=self.config.version,
            configuration_values=values or None,
            # Deleting the add-on removes what it installed, so cdk destroy leaves no
            # orphaned controllers in the cluster.
            preserve_on_delete=False,
        )
        for resource in prerequisites:
            addon.node.add_dependency(resource)
        return addon


def hyperpod_tolerations(settings: Settings) -> list[dict]:
    """Tolerations for system add-ons: HyperPod marks nodes under deep health checks or
    recovery with the node-health-status taint, and config may taint whole groups."""
    tolerations = [
        {"key": "sagemaker.amazonaws.com/node-health-status", "operator": "Equal", "value": "Unschedulable", "effect": "NoSchedule"}
    ]
    seen = set()
    for group in settings.hyperpod.instance_groups:
        for taint in group.taints:
            if (taint.key, taint.effect) not in seen:
                seen.add((taint.key, taint.effect))
                tolerations.append({"key": taint.key, "operator": "Exists", "effect": taint.effect})
    return tolerations
