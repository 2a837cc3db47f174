"""The FSx for Lustre CSI driver (EKS add-on `aws-fsx-csi-driver`) and the shared file
system as the claim `fsx` in every team's namespace (fsx.enabled).

Static volumes: the file system is a CloudFormation resource (stacks/storage.py) or an
existing one, so each namespace gets a PersistentVolume naming it (volumeHandle, dnsname,
mountname, as the quick setup's fsx-for-lustre Lambda writes them) bound by claimRef to that
namespace's claim. The controller creates nothing; its role only describes file systems. The
add-on gets no configuration values of ours, as in the quick setup's fsx-template.yaml (a key
outside the add-on's schema fails CreateAddon); addons.fsx_csi.configuration_values adds some.

One file system, one directory per team: each team's volume mounts only its own directory
(the driver mounts `<dnsname>@tcp:/<mountname>`, so a mountname of `<MountName>/<directory>`
mounts that Lustre subdirectory; its node.go), never the root another team's data is under.
Lustre mounts only a directory that exists, so a Job in kube-system, on the root, makes them
first, and a gate waits for it; the team volumes come after. Without teams, the one claim in
`default` is the root.
"""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon
from addons.pod_identity_agent import PodIdentityAgentAddon
from addons.task_governance import TaskGovernanceAddon
import hashlib

from infra import lazy, naming
from infra.config import EKS_ADDON_NAMES

cdk = lazy.module("aws_cdk")
eks = lazy.module("aws_cdk.aws_eks_v2")
iam = lazy.module("aws_cdk.aws_iam")
compliance = lazy.module("infra.compliance")
pod_identity = lazy.module("infra.pod_identity")
readiness = lazy.module("infra.readiness")

DRIVER = "fsx.csi.aws.com"
CONTROLLER_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
CLAIM = "fsx"


# What makes the team directories: a Job in kube-system (no Pod Security level there) on a
# volume of the file system's root, as root, since the root directory is root's.
DIRECTORIES = "fsx-team-directories"
DIRECTORIES_NAMESPACE = "kube-system"
# Each team's directory is world-writable and sticky, as /tmp: only that team's pods mount it,
# and they run as whatever user their image has.
DIRECTORY_MODE = "1777"
# The Job's own limit; its gate waits a little longer (readiness.kubernetes_ready's minutes).
DIRECTORIES_DEADLINE_S = 600


def namespaces(settings) -> list[str]:
    """Where the claim goes: each team's namespace, or `default` without teams."""
    return [naming.team_names(t.name).namespace for t in settings.governance.teams] or ["default"]


def directory(settings, namespace: str) -> str | None:
    """The namespace's directory of the file system; None (the root) without teams."""
    return namespace if settings.governance.teams else None


def _size(settings) -> str:
    return f"{settings.fsx.storage_gib}Gi" if settings.fsx.existing is None else "1200Gi"


def _volume(settings, file_system, name: str, claim: tuple[str, str], subdirectory: str | None) -> list[dict]:
    """A PersistentVolume of the file system (or one directory of it) and the claim bound to it."""
    namespace, claim_name = claim
    mount_name = file_system.mount_name if subdirectory is None else f"{file_system.mount_name}/{subdirectory}"
    handle = file_system.file_system_id if subdirectory is None else f"{file_system.file_system_id}:{subdirectory}"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": _size(settings)},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteMany"],
                # Deleting a claim never deletes the shared data.
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "mountOptions": ["flock"],
                "claimRef": {"namespace": namespace, "name": claim_name},
                # A handle per directory: kubelet tells volumes apart by driver and handle.
                "csi": {"driver": DRIVER, "volumeHandle": handle, "volumeAttributes": {"dnsname": file_system.dns_name, "mountname": mount_name}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim_name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": name, "resources": {"requests": {"storage": _size(settings)}}},
        },
    ]


def volume_objects(settings, file_system) -> list[dict]:
    """One PersistentVolume per namespace (a PV binds one claim), each on its own directory."""
    return [o for ns in namespaces(settings) for o in _volume(settings, file_system, f"{CLAIM}-{ns}", (ns, CLAIM), directory(settings, ns))]


def directories_job_name(settings) -> str:
    """The Job's name carries the directories it makes: a Job's template cannot change, so new
    teams make a new Job (the old one is gone after its TTL)."""
    dirs = " ".join(sorted(filter(None, (directory(settings, ns) for ns in namespaces(settings)))))
    return f"{DIRECTORIES}-{hashlib.sha256(dirs.encode()).hexdigest()[:8]}"


def directory_objects(settings, file_system) -> list[dict]:
    """The root volume in kube-system and the Job that makes every team's directory on it;
    nothing without teams."""
    dirs = sorted(filter(None, (directory(settings, ns) for ns in namespaces(settings))))
    if not dirs:
        return []
    paths = " ".join(f"{naming.FSX_MOUNT}/{d}" for d in dirs)
    pod = {
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,
        # Any node: every HyperPod node runs the CSI node plugin, whatever its taints.
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "mkdir",
                "image": settings.fsx.directory_image,
                "command": ["/bin/sh", "-c", f"mkdir -p {paths} && chmod {DIRECTORY_MODE} {paths}"],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "root", "mountPath": naming.FSX_MOUNT}],
            }
        ],
        "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": DIRECTORIES}}],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": directories_job_name(settings), "namespace": DIRECTORIES_NAMESPACE},
        "spec": {"backoffLimit": 3, "activeDeadlineSeconds": DIRECTORIES_DEADLINE_S, "ttlSecondsAfterFinished": 3600, "template": {"spec": pod}},
    }
    root = _volume(settings, file_system, f"{DIRECTORIES}-root", (DIRECTORIES_NAMESPACE, DIRECTORIES), None)
    return [*root, job]


class FsxCsiAddon(ManagedAddon):
    key = "fsx_csi"
    title = "FSx for Lustre CSI driver"
    eks_name = EKS_ADDON_NAMES["fsx_csi"]
    requires = (PodIdentityAgentAddon,)
    # The claims go into the team namespaces task governance creates.
    after = (TaskGovernanceAddon,)

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
        if not self.settings.fsx.enabled:  # only the driver, for the inference operator
            return driver
        volumes = eks.KubernetesManifest(
            ctx.scope, "SharedFileSystemClaims", cluster=ctx.cluster, manifest=volume_objects(self.settings, ctx.file_system)
        )
        volumes.node.add_dependency(driver)
        made = directory_objects(self.settings, ctx.file_system)
        if made:
            job = eks.KubernetesManifest(ctx.scope, "SharedFileSystemDirectories", cluster=ctx.cluster, manifest=made)
            job.node.add_dependency(driver)
            done = readiness.kubernetes_ready(
                ctx.scope, "SharedFileSystemDirectoriesMade", cluster=ctx.cluster, kind="job", name=directories_job_name(self.settings),
                namespace=DIRECTORIES_NAMESPACE, json_path=".status.succeeded", minutes=DIRECTORIES_DEADLINE_S // 60 + 2,
            )
            done.node.add_dependency(job)
            volumes.node.add_dependency(done)
        for team in self.settings.governance.teams:
            gate = ctx.scope.node.try_find_child(f"Namespace-{team.name}")
            if gate is not None:  # the namespace exists once task governance made it
                volumes.node.add_dependency(gate)
        return volumes
