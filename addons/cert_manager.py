"""cert-manager (EKS add-on `cert-manager`): the training operator's webhooks need it."""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon, hyperpod_tolerations
from addons.core_dns import CoreDnsAddon


class CertManagerAddon(ManagedAddon):
    key = "cert_manager"
    title = "cert-manager"
    eks_name = "cert-manager"
    # Its pods need a node and cluster DNS to become ready.
    after = (CoreDnsAddon,)

    def configuration(self, ctx: AddonContext) -> dict:
        # Without these, cert-manager stays Pending on HyperPod nodes whose groups carry
        # taints, or while nodes are marked by deep health checks.
        tolerations = hyperpod_tolerations(ctx.settings)
        return {
            "tolerations": tolerations,
            "webhook": {"tolerations": tolerations},
            "cainjector": {"tolerations": tolerations},
            "startupapicheck": {"tolerations": tolerations},
        }
