"""`<prefix>-<env>-addons`: the EKS add-ons that make HyperPod a training platform, and
task governance's scheduler config and team quotas (built by its add-on).

One pass: `addons.registry.plan` orders the enabled add-ons and checks requirements,
then each is built and made to depend on the ones it requires or must follow.
"""

from __future__ import annotations

from constructs import Construct

from addons import registry
from addons.base import AddonContext
from infra.config import Settings
from infra.stack import PlatformStack
from stacks.cluster import ClusterStack
from stacks import storage
from stacks.hyperpod import HyperPodStack


class AddonsStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings, cluster: ClusterStack, hyperpod: HyperPodStack):
        super().__init__(scope, "addons", settings=settings, description="EKS add-ons for HyperPod")
        # Every add-on here runs pods, and pods need the HyperPod nodes.
        self.add_stack_dependency(hyperpod)
        ctx = AddonContext(
            scope=self,
            settings=settings,
            cluster=cluster.cluster,
            pod_identity_agent=cluster.pod_identity_agent,
            hyperpod_cluster_arn=hyperpod.cluster.attr_cluster_arn,
            file_system=storage.read_file_system(self, settings) if settings.fsx.enabled else None,
            bucket_key=cluster.bucket_key,
            access_logs=cluster.access_logs,
        )
        self.plan = registry.plan(settings)
        self.built = {}
        for addon in self.plan:
            # Across stacks (the Pod Identity agent) this becomes the stack dependency it already is.
            after = [self.built[dep] for dep in registry.dependencies(addon, self.plan)]
            self.built[type(addon)] = addon.build(ctx, after)

    @property
    def prometheus(self):
        """The observability add-on's Prometheus workspace (AWS::APS::Workspace), or None when it is off."""
        from addons.observability import ObservabilityAddon

        return next((a.prometheus for a in self.plan if isinstance(a, ObservabilityAddon)), None)
