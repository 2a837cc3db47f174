"""The EKS Pod Identity agent: installed by the cluster stack, referenced here.

It is part of the contract so that add-ons can require it and wait for it, but it is
never installed a second time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from addons.base import Addon, AddonContext

if TYPE_CHECKING:
    from constructs import IConstruct


class PodIdentityAgentAddon(Addon):
    key = "pod_identity_agent"
    title = "EKS Pod Identity agent"
    core = True  # always installed with the cluster

    def build(self, ctx: AddonContext, after: list[IConstruct]) -> IConstruct:
        return ctx.pod_identity_agent
