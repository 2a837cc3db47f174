"""CoreDNS as an EKS managed add-on, once HyperPod nodes exist.

Created with the control plane it would stay DEGRADED (no node to run on) and hold the
deploy until CloudFormation times out, so it waits for the HyperPod cluster instead.
"""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon, hyperpod_tolerations


class CoreDnsAddon(ManagedAddon):
    key = "coredns"
    title = "CoreDNS"
    eks_name = "coredns"
    core = True  # the cluster needs DNS; version and values from eks.core_addons.coredns

    def configuration(self, ctx: AddonContext) -> dict:
        return {"tolerations": hyperpod_tolerations(ctx.settings)}
