"""The FSx for Lustre CSI driver (EKS add-on `aws-fsx-csi-driver`) and the shared file
system as the claim `fsx` in every team's namespace (fsx.enabled).

Static volumes: the file system is a CloudFormation resource (stacks/storage.py) or an
existing one, so each namespace gets a PersistentVolume naming it (volumeHandle, dnsname,
mountname, as the quick setup's fsx-for-lustre Lambda writes them) bound by claimRef to that
namespace's claim. The controller creates nothing; its role only describes file systems. The
add-on gets no configuration values of ours, as in the quick setup's fsx-template.yaml (a key
outside the add-on's schema fails CreateAddon); addons.fsx_csi.configuration_values adds some.
"""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon
from addons.pod_identity_agent import PodIdentityAgentAddon
from addons.task_governance import TaskGovernanceAddon
from infra import lazy, naming

cdk = lazy.module("aws_cdk")
eks = lazy.module("aws_cdk.aws_eks_v2")
iam = lazy.module("aws_cdk.aws_iam")
compliance = lazy.module("infra.compliance")
pod_identity = lazy.module("infra.pod_identity")

DRIVER = "fsx.csi.aws.com"
CONTROLLER_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
CLAIM = "fsx"


def namespaces(settings) -> list[str]:
    """Where the claim goes: each team's namespace, or `default` without teams."""
    return [naming.team_names(t.name).namespace for t in settings.governance.teams] or ["default"]


def volume_objects(settings, file_system) -> list[dict]:
    """One PersistentVolume per namespace (a PV binds one claim), all naming the same file system."""
    size = f"{settings.fsx.storage_gib}Gi" if settings.fsx.existing is None else "1200Gi"
    out = []
    for namespace in namespaces(settings):
        pv_name = f"{CLAIM}-{namespace}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": size},
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteMany"],
                    # Deleting a claim never deletes the shared data.
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "mountOptions": ["flock"],
                    "claimRef": {"namespace": namespace, "name": CLAIM},
                    "csi": {
                        "driver": DRIVER,
                        "volumeHandle": file_system.file_system_id,
                        "volumeAttributes": {"dnsname": file_system.dns_name, "mountname": file_system.mount_name},
                    },
                },
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": CLAIM, "namespace": namespace},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": size}},
                },
            }
        )
    return out


class FsxCsiAddon(ManagedAddon):
    key = "fsx_csi"
    title = "FSx for Lustre CSI driver"
    eks_name = "aws-fsx-csi-driver"
    requires = (PodIdentityAgentAddon,)
    # The claims go into the team namespaces task governance creates.
    after = (TaskGovernanceAddon,)

    @property
    def enabled(self) -> bool:
        return self.settings.fsx.enabled and self.config.enabled

    def prerequisites(self, ctx: AddonContext):
        identity = pod_identity.pod_identity_role(
            ctx.scope,
            ctx.cluster,
            "FsxCsiController",
            namespace="kube-system",
            service_account=CONTROLLER_SERVICE_ACCOUNT,
            description="FSx CSI controller (Pod Identity): static volumes only, so it describes file systems",
            statements=(iam.PolicyStatement(actions=["fsx:DescribeFileSystems"], resources=["*"]),),
        )
        compliance.acknowledge(
            identity.policy,
            "fsx:DescribeFileSystems only reads and supports no narrower resource for listing; the controller "
            "creates no file systems (volumes are static)",
            "AwsSolutions-IAM5[Resource::*]",
        )
        return [identity.association]

    def build(self, ctx: AddonContext, after):
        driver = super().build(ctx, after)
        volumes = eks.KubernetesManifest(
            ctx.scope, "SharedFileSystemClaims", cluster=ctx.cluster, manifest=volume_objects(self.settings, ctx.file_system)
        )
        volumes.node.add_dependency(driver)
        for team in self.settings.governance.teams:
            gate = ctx.scope.node.try_find_child(f"Namespace-{team.name}")
            if gate is not None:  # the namespace exists once task governance made it
                volumes.node.add_dependency(gate)
        return volumes
