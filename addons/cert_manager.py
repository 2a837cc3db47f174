"""cert-manager (EKS add-on `cert-manager`): the training operator's webhooks need it."""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon, ReadyWhen, tolerate_every_taint
from infra.config import EKS_ADDON_NAMES


class CertManagerAddon(ManagedAddon):
    key = "cert_manager"
    title = "cert-manager"
    eks_name = EKS_ADDON_NAMES["cert_manager"]
    # The training operator's certificates are issued through this webhook.
    ready_when = ReadyWhen.deployment_available("cert-manager", "cert-manager-webhook")

    def configuration(self, ctx: AddonContext) -> dict:
        # The keys and values the awsome Terraform passes (modules/hyperpod_cluster/cert_manager.tf):
        # a key outside the add-on's schema fails CreateAddon. Tolerating every taint keeps
        # cert-manager running on tainted groups and on nodes under deep health checks.
        tolerations = tolerate_every_taint()
        return {
            "replicaCount": 1,
            "tolerations": tolerations,
            "webhook": {"replicaCount": 1, "tolerations": tolerations},
            "cainjector": {"replicaCount": 1, "tolerations": tolerations},
        }
