"""The one contract every add-on honours, and the pieces two or more of them share.

An add-on has a `key` (its block under `addons` in config), the add-ons it `requires`
(a missing one is a config error), the ones it must merely come `after` when they are on,
and a `build` that puts it into the addons stack and returns the construct others wait
for. `addons.registry.plan` orders the enabled ones; the stack wires the dependencies.

An add-on the cluster already runs (`existing`, on a cluster this project joins) is enabled
all the same: it satisfies what requires it and is ordered like the others, but its build
creates no add-on and no prerequisite of its own, only the readiness gate dependents wait for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from typing import TYPE_CHECKING

from infra import lazy

from infra.config import AddonSwitch, Settings, deep_merge

if TYPE_CHECKING:
    from constructs import IConstruct

cdk = lazy.module("aws_cdk")
eks = lazy.module("aws_cdk.aws_eks_v2")
readiness = lazy.module("infra.readiness")


# What shows a CustomResourceDefinition served: its Established condition True. A gate prints
# the path's value and passes on any output, and the naming controller writes Established False
# ("NotAccepted", "Installing") before True, so the path selects the condition by the reason only
# True carries (k8s.io/apiextensions-apiserver naming and establishing controllers:
# "InitialNamesAccepted"); kubectl's JSONPath has no `&&` in a filter. tests/test_gate_jsonpaths.py
# runs it through kubectl.
CRD_ESTABLISHED = '.status.conditions[?(@.reason=="InitialNamesAccepted")].status'


@dataclass(frozen=True)
class ReadyWhen:
    """What shows an add-on serving: a Kubernetes object with a value at a JSON path."""

    kind: str
    name: str
    namespace: str
    json_path: str

    @staticmethod
    def deployment_available(namespace: str, name: str) -> "ReadyWhen":
        # What `kubectl wait --for=condition=available` waits for, as the awsome Terraform does.
        return ReadyWhen("deployment", name, namespace, ".status.availableReplicas")

    @staticmethod
    def crd_established(name: str) -> "ReadyWhen":
        return ReadyWhen("customresourcedefinition", name, "default", CRD_ESTABLISHED)

    @staticmethod
    def pod_ready_as(namespace: str, service_account: str) -> "ReadyWhen":
        """A ready container in a pod running as `service_account`: a controller whose
        Deployment no source names, found by the service account its add-on documents. The
        kubectl provider's get handler passes the object name to `kubectl get -n NS TYPE NAME`
        as one argument (aws-eks-v2 kubectl-handler/get), so a field selector goes there;
        `spec.serviceAccountName` is one of the pod fields the API server selects on."""
        return ReadyWhen("pods", f"--field-selector=spec.serviceAccountName={service_account}", namespace,
                         ".items[*].status.containerStatuses[?(@.ready==true)].name")


@dataclass(frozen=True)
class AddonContext:
    """What an add-on may build against."""

    scope: cdk.Stack
    settings: Settings
    cluster: eks.ICluster
    # The cluster stack's own Pod Identity agent: reused, never installed twice.
    pod_identity_agent: IConstruct
    # What task governance's scheduler config and quotas attach to.
    hyperpod_cluster_arn: str
    # The shared FSx file system (stacks/storage.FileSystem) where fsx.enabled.
    file_system: object = None
    # The cluster stack's data key and access-log bucket, for a bucket an add-on needs (the
    # inference operator's TLS certificates).
    bucket_key: object = None
    access_logs: object = None


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
    def config_path(self) -> str:
        """Where its switch is in config (what a line about it names)."""
        return f"{'eks.core_addons' if self.core else 'addons'}.{self.key}"

    @property
    def enabled(self) -> bool:
        """A core add-on always; another where its switch is on and something the config turns on
        needs it (Settings.addon_wanted: the CSI drivers and metrics-server only beside what uses them)."""
        return self.core or (self.config.enabled and self.settings.addon_wanted(self.key))

    @property
    def existing(self) -> bool:
        """The cluster already runs it (addons.<key>.existing): the deploy creates none."""
        return not self.core and self.config.existing

    @abstractmethod
    def build(self, ctx: AddonContext, after: list[IConstruct]) -> IConstruct:
        """Build into ctx.scope, created after `after` (the add-ons it requires or follows);
        return the construct that dependents must wait for."""


class ManagedAddon(Addon):
    """An EKS add-on by name, with the config's pinned version and extra values merged
    over the ones the add-on computes."""

    eks_name: ClassVar[str]
    # When set, dependents wait for this readiness gate, not only for the add-on resource
    # (CloudFormation reports an add-on created before its webhooks answer), and for each of
    # `also_ready_when` after it (EKS reports an add-on ACTIVE, and even DEGRADED, while its
    # controller may not run).
    ready_when: ClassVar[ReadyWhen | None] = None
    also_ready_when: ClassVar[tuple[ReadyWhen, ...]] = ()

    def configuration(self, ctx: AddonContext) -> dict:
        return {}

    def prerequisites(self, ctx: AddonContext) -> list[IConstruct]:
        """Resources the add-on itself must be created after (its Pod Identity association)."""
        return []

    def build(self, ctx: AddonContext, after: list[IConstruct]) -> IConstruct:
        if self.existing:
            return self._ready(ctx, after) if self.ready_when else ctx.cluster
        prerequisites = [*self.prerequisites(ctx), *after]
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
        overwrite_conflicts(addon)
        for resource in prerequisites:
            addon.node.add_dependency(resource)
        if self.ready_when is None:
            return addon
        return self._ready(ctx, [addon])

    def _ready(self, ctx: AddonContext, after: list[IConstruct]) -> IConstruct:
        """The gate dependents wait for: ours once it is created, or the cluster's own (still
        proved serving: "ready" means the cluster can run the work)."""
        gate = None
        for n, ready in enumerate((self.ready_when, *self.also_ready_when)):
            # The first keeps the id a single gate had, so nothing is replaced by the second.
            previous, gate = gate, readiness.kubernetes_ready(
                ctx.scope,
                f"{type(self).__name__}Ready" + (str(n + 1) if n else ""),
                cluster=ctx.cluster,
                kind=ready.kind,
                name=ready.name,
                namespace=ready.namespace,
                json_path=ready.json_path,
                minutes=10,
            )
            for resource in after if previous is None else [previous]:
                gate.node.add_dependency(resource)
        return gate


def tolerate_every_taint() -> list[dict]:
    """Tolerations for system add-ons, as the references write them: one `Exists` per effect."""
    return [{"operator": "Exists", "effect": effect} for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")]


def overwrite_conflicts(addon: eks.Addon) -> None:
    """Both references create every add-on with ResolveConflicts OVERWRITE: a field that a
    self-managed copy set differently takes the add-on's value instead of failing the create."""
    cfn: eks.CfnAddon = addon.node.default_child
    cfn.resolve_conflicts = "OVERWRITE"
