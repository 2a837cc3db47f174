"""Kubernetes version support, which components document which versions, and what the
add-on versions carry (task governance's Kueue, the training operator's IAM metadata).

Kept as data with its sources so a reviewer can check it, so validation can warn (not fail)
when the chosen version is outside a component's published range, and so the review can
stop at an add-on update that needs a step of its own first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The newest version that HyperPod and every add-on here document (see COMPONENT_RANGES).
# It left EKS standard support on 2026-12-02 (as 1.33 did before it), so it is billed at the
# extended rate, whose support ends later than 1.33's: docs/configuration.md states the extra cost.
DEFAULT_EKS_VERSION = "1.34"
# The oldest version HyperPod documents; 1.28 to 1.31 are past extended support (END_OF_EXTENDED_SUPPORT),
# so EKS creates them only for accounts on a support exception (the package still synthesizes them).
MIN_EKS_VERSION = (1, 28)
# The newest version aws_eks_v2.KubernetesVersion offers in aws-cdk-lib 2.275.
MAX_EKS_VERSION = (1, 36)
# The oldest version in EKS standard support: 1.34 leaves it on 2026-12-02.
OLDEST_STANDARD_SUPPORT = (1, 35)
EKS_SUPPORT_SOURCE = "Amazon EKS Kubernetes release calendar, as of 2026-12-02"
SUPPORT_AS_OF = "2026-12-02"
# The day each version older than OLDEST_STANDARD_SUPPORT leaves extended support: 14 months of
# standard support, then 12 of extended, after which EKS upgrades the cluster itself (EKS user
# guide, "Understand the Kubernetes version lifecycle on EKS"; the dates from its release
# calendar, as endoflife.date/amazon-eks lists them, read 2026-12-05).
END_OF_EXTENDED_SUPPORT = {
    "1.28": "2025-11-26", "1.29": "2026-03-23", "1.30": "2026-07-23", "1.31": "2026-11-26",
    "1.32": "2027-03-23", "1.33": "2027-07-29", "1.34": "2027-12-02",
}

# The day each version in standard support leaves it (same calendar): with
# `eks.upgrade_policy` STANDARD, EKS upgrades the control plane to the next version that day.
END_OF_STANDARD_SUPPORT = {"1.35": "2027-03-27", "1.36": "2027-08-02"}
# EKS user guide, disable-extended-support page: "you cannot disable extended support once your
# cluster has entered it"; STANDARD is for a version still in standard support.
SUPPORT_POLICY_SOURCE = "EKS user guide, Disable EKS extended support (disable-extended-support.html)"


@dataclass(frozen=True)
class ComponentRange:
    component: str
    oldest: tuple[int, int]
    newest: tuple[int, int]
    source: str
    seen: str  # when the source was read


_HYPERPOD_PREREQUISITES = "AWS docs page sagemaker-hyperpod-eks-prerequisites, supported Kubernetes versions"
COMPONENT_RANGES: tuple[ComponentRange, ...] = (
    # Two copies of the page disagree: the English one as stored lists 1.28-1.33, its Chinese
    # translation (docs.amazonaws.cn zh_cn .md), made from a newer English text, lists 1.28-1.34.
    # The newer text wins; the quick setup's eks-template.yaml defaults to 1.34 likewise.
    ComponentRange(
        "SageMaker HyperPod (EKS orchestrator)",
        (1, 28),
        (1, 34),
        f"{_HYPERPOD_PREREQUISITES} (1.28-1.34 in the newer zh_cn copy; 1.28-1.33 in the older English copy)",
        "2026-12",
    ),
    # The add-on's own published range: DescribeAddonVersions metadata of v1.2.1-eksbuild.1, the
    # default for Kubernetes 1.28-1.35 (awsome-distributed-ai PR 1076). Its docs page, older,
    # still lists 1.28-1.33.
    ComponentRange(
        "HyperPod training operator add-on",
        (1, 28),
        (1, 35),
        "DescribeAddonVersions of amazon-sagemaker-hyperpod-training-operator v1.2.1-eksbuild.1, as quoted in "
        "https://github.com/awslabs/awsome-distributed-ai/pull/1076 (its docs page sagemaker-eks-operator, older, lists 1.28-1.33)",
        "2026-12",
    ),
)

# The training operator page documents PyTorch 2.4.0-2.7.1 and recommends Kueue v0.12.2 and
# v0.12.3, the Kueue line of task governance v1.3.x; task governance v1.6 ships Kueue 0.19.2,
# which that page does not list yet (TASK_GOVERNANCE_RELEASES).
TRAINING_OPERATOR_PYTORCH_RANGE = ("2.4.0", "2.7.1")
TRAINING_OPERATOR_KUEUE_RECOMMENDED = ("0.12.2", "0.12.3")
# Task governance below this is refused by the training operator.
TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR = "v1.3.0-eksbuild.1"
# Topology-aware scheduling needs task governance at least this version.
TASK_GOVERNANCE_MIN_FOR_TOPOLOGY = "v1.2.2"
# The first training operator with elastic training (AWS docs, "Using elastic training in
# Amazon SageMaker HyperPod": training operator v1.2 and above).
TRAINING_OPERATOR_MIN_FOR_ELASTIC = "v1.2.0"

TASK_GOVERNANCE_UPGRADE_PAGE = (
    "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-operate-console-ui-governance-upgrade.html"
)


@dataclass(frozen=True)
class TaskGovernanceRelease:
    version: str  # an add-on version, or a line of them (v1.3.x)
    kueue: str | None  # the Kueue it packages; None where no source states it
    note: str
    source: str
    seen: str


TASK_GOVERNANCE_RELEASES: tuple[TaskGovernanceRelease, ...] = (
    TaskGovernanceRelease(
        "v1.3.x",
        "0.12.x",
        "not stated on the upgrade page, which says v1.3.x stores Cohorts as v1alpha1 (Kueue promoted them to "
        "v1beta1 in 0.13, kubernetes-sigs/kueue PR 5595); the training operator, which needs task governance "
        "v1.3.0 or newer, recommends Kueue 0.12.2 and 0.12.3",
        f"{TASK_GOVERNANCE_UPGRADE_PAGE} (Upgrade from v1.3.x to v1.5 or later); AWS docs page sagemaker-eks-operator, "
        "supported versions",
        "2026-12-04",
    ),
    TaskGovernanceRelease(
        "v1.5.0-eksbuild.1",
        None,
        "the page names no Kueue version; its CRDs store kueue.x-k8s.io/v1beta2 (the migration restores objects "
        "as v1beta2), which Kueue stores from 0.16.0 (kubernetes-sigs/kueue issue 9281)",
        f"{TASK_GOVERNANCE_UPGRADE_PAGE} (Upgrade from v1.3.x to v1.5 or later)",
        "2026-12-04",
    ),
    TaskGovernanceRelease(
        "v1.6.0-eksbuild.1",
        "0.19.2",
        "a direct update-addon from v1.5, no CRD migration; validates the topology slice size "
        "(kueue.x-k8s.io/podset-slice-size) at submission",
        f"{TASK_GOVERNANCE_UPGRADE_PAGE} (Upgrade from v1.5 to v1.6)",
        "2026-12-04",
    ),
)

# From below this version to this or later, a plain update-addon fails: the newer Kueue CRDs
# drop v1alpha1, which v1.3.x stored objects as, so the API server refuses them while each
# CRD's status.storedVersions still lists it.
TASK_GOVERNANCE_CRD_MIGRATION = "v1.5.0-eksbuild.1"
TASK_GOVERNANCE_MIGRATION_ERROR = (
    'CustomResourceDefinition.apiextensions.k8s.io "cohorts.kueue.x-k8s.io" is invalid: status.storedVersions[0]: '
    'Invalid value: "v1alpha1": missing from spec.versions'
)
# The ways across the migration, in one line: the upgrade page's recommended one, the quick
# setup's template that automates it, and the manual steps below (`hyperpod-cdk upgrade-plan`).
TASK_GOVERNANCE_MIGRATION_WAYS = (
    "the HyperPod console's task governance upgrade (recommended by the upgrade page, it migrates the Kueue CRDs), the "
    "quick setup's task-governance-addon-migration-template.yaml (backup, update, restore), or the page's manual steps "
    f"(hyperpod-cdk upgrade-plan prints them; {TASK_GOVERNANCE_UPGRADE_PAGE})"
)
# The upgrade page's manual procedure, step by step (its recommended way is the HyperPod
# console's upgrade option, which migrates the CRDs itself).
TASK_GOVERNANCE_MIGRATION_STEPS = (
    "back up every kueue.x-k8s.io object, one file per kind (`kubectl get <kind>.kueue.x-k8s.io -A -o json`)",
    "delete them and set each Kueue CRD's status.storedVersions to [\"v1beta2\"] "
    "(`kubectl patch crd <kind>.kueue.x-k8s.io --subresource=status`)",
    "update the add-on to the new version (`aws eks update-addon --resolve-conflicts OVERWRITE`) and wait for ACTIVE",
    "wait for kueue-controller-manager and its webhook endpoint",
    "restore the objects as kueue.x-k8s.io/v1beta2 (Cohort spec.parent becomes parentName, ClusterQueue "
    "spec.cohort becomes cohortName)",
)


# EKS version rollback (EKS user guide, rollback-cluster): within 7 days of an in-place upgrade the
# control plane can go back one minor version (UpdateClusterVersion to N-1; ListInsights category
# ROLLBACK_READINESS says what blocks it). It reverts the API server, the control-plane components and
# the platform version; not the add-ons, not nodes other than Auto Mode's (HyperPod's are not), not
# etcd data, and a CloudFormation stack rollback to a template with the lower version does not start it.
ROLLBACK_WINDOW_DAYS = 7
ROLLBACK_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/rollback-cluster.html"


# The VPC CNI a cluster must run for HyperPod to join it ("SageMaker HyperPod requires the
# Amazon VPC CNI plugin version 1.18.3 or later"; the only CNI it supports).
VPC_CNI_MIN_FOR_HYPERPOD = (1, 18, 3)
VPC_CNI_SOURCE = "AWS docs page sagemaker-hyperpod-eks-prerequisites, Networking (seen 2026-12)"


@dataclass(frozen=True)
class TrainingOperatorRelease:
    version: str
    # DescribeAddonVersions' requiresIamPermissions: EKS accepts a Pod Identity association
    # inline on the add-on only where it is true, hence the standalone association here.
    requires_iam_permissions: bool
    default: bool  # the version EKS installs when none is pinned
    source: str
    seen: str


_PR_1076 = "https://github.com/awslabs/awsome-distributed-ai/pull/1076 (issue 1075), DescribeAddonVersions metadata"
TRAINING_OPERATOR_RELEASES: tuple[TrainingOperatorRelease, ...] = (
    TrainingOperatorRelease("v1.0.0", False, False, _PR_1076, "2026-12-04"),
    TrainingOperatorRelease("v1.0.1", False, False, _PR_1076, "2026-12-04"),
    TrainingOperatorRelease("v1.1.0", True, False, _PR_1076, "2026-12-04"),
    TrainingOperatorRelease("v1.1.1", True, False, _PR_1076, "2026-12-04"),
    TrainingOperatorRelease("v1.1.2", True, False, _PR_1076, "2026-12-04"),
    TrainingOperatorRelease("v1.2.0-eksbuild.1", True, False, _PR_1076, "2026-12-04"),
    # The default for Kubernetes 1.28-1.35.
    TrainingOperatorRelease("v1.2.1-eksbuild.1", False, True, _PR_1076, "2026-12-04"),
)


def parse(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def fmt(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def kubectl_layer_module(version: str) -> tuple[str, str, str]:
    """(python module, class name, PyPI package) of the kubectl layer matching `version`."""
    minor = parse(version)[1]
    return (
        f"aws_cdk.lambda_layer_kubectl_v{minor}",
        f"KubectlV{minor}Layer",
        f"aws-cdk.lambda-layer-kubectl-v{minor}",
    )


def support_status(version: str) -> str:
    """standard, extended or outside (past extended support), on SUPPORT_AS_OF (EKS_SUPPORT_SOURCE)."""
    if parse(version) >= OLDEST_STANDARD_SUPPORT:
        return "standard"
    ends = END_OF_EXTENDED_SUPPORT.get(version)
    return "extended" if ends is not None and ends > SUPPORT_AS_OF else "outside"


def support_warnings(version: str) -> list[str]:
    """One line per component whose documented range leaves out `version`."""
    chosen = parse(version)
    lines = []
    if chosen < OLDEST_STANDARD_SUPPORT:
        lines.append(
            f"eks.version: {version} is older than the oldest version in EKS standard "
            f"support ({fmt(OLDEST_STANDARD_SUPPORT)}); the control plane is billed at the extended-support rate "
            f"(source: {EKS_SUPPORT_SOURCE})"
        )
    for rng in COMPONENT_RANGES:
        if not rng.oldest <= chosen <= rng.newest:
            lines.append(
                f"eks.version: {version} is outside the documented range of {rng.component} "
                f"({fmt(rng.oldest)}-{fmt(rng.newest)}; source: {rng.source}, read {rng.seen})"
            )
    return lines


def addon_version_at_least(pinned: str, minimum: str) -> bool:
    """Compare EKS add-on versions like v1.3.0-eksbuild.1 by their numeric parts."""

    def key(v: str) -> tuple[int, ...]:
        core, _, build = v.lstrip("v").partition("-eksbuild.")
        return tuple(int(p) for p in core.split(".")) + (int(build or 0),)

    return key(pinned) >= key(minimum)


def crosses_task_governance_migration(before: str | None, after: str | None) -> bool | None:
    """Whether moving the task governance add-on from `before` to `after` crosses the Kueue
    CRD migration. None when `before` is unknown (not pinned: EKS chose it at create time, so
    only the cluster can say) and `after` is past the migration."""
    if after is None or not addon_version_at_least(after, TASK_GOVERNANCE_CRD_MIGRATION):
        return False
    if before is None:
        return None
    return not addon_version_at_least(before, TASK_GOVERNANCE_CRD_MIGRATION)


# ------------------------------------------------------------------ add-on versions per Kubernetes version
# What `hyperpod-cdk upgrade-plan` shows offline for each step; with credentials it asks the
# account instead (DescribeAddonVersions). An add-on no row names for a version is left to
# that call, never guessed.


@dataclass(frozen=True)
class AddonRelease:
    addon: str  # EKS add-on name
    kubernetes: tuple[str, ...]  # the Kubernetes versions the source lists it for
    version: str
    source: str
    seen: str


# The EKS user guide's tables "the latest version of the Amazon EKS add-on type for each
# Kubernetes version", as stored in the docs snapshot read here (docs.amazonaws.cn, zh_cn .md
# copies, the newest rows of the stored copies); AWS adds eksbuild numbers often.
_KUBE_PROXY_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/managing-kube-proxy.html, table kube-proxy versions"
_COREDNS_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/managing-coredns.html, table CoreDNS versions"
# The same kind of table for the VPC CNI; the English copies stored here stop at 1.33
# (v1.20.1-eksbuild.3), the zh_cn .md copy (docs.amazonaws.cn/eks/latest/userguide/managing-vpc-cni.md)
# lists 1.29 to 1.35, each with v1.21.1-eksbuild.7.
_VPC_CNI_PAGE = (
    "https://docs.aws.amazon.com/eks/latest/userguide/managing-vpc-cni.html, table Amazon VPC CNI versions "
    "(1.29-1.35 in the newer docs.amazonaws.cn zh_cn .md copy; the English copies stored end at 1.33)"
)
ADDON_RELEASES: tuple[AddonRelease, ...] = (
    AddonRelease("kube-proxy", ("1.35",), "v1.35.3-eksbuild.2", _KUBE_PROXY_PAGE, "2026-12-04"),
    AddonRelease("kube-proxy", ("1.34",), "v1.34.6-eksbuild.2", _KUBE_PROXY_PAGE, "2026-12-04"),
    AddonRelease("kube-proxy", ("1.33",), "v1.33.10-eksbuild.2", _KUBE_PROXY_PAGE, "2026-12-04"),
    AddonRelease("kube-proxy", ("1.32",), "v1.32.13-eksbuild.5", _KUBE_PROXY_PAGE, "2026-12-04"),
    AddonRelease("kube-proxy", ("1.31",), "v1.31.14-eksbuild.9", _KUBE_PROXY_PAGE, "2026-12-04"),
    AddonRelease("kube-proxy", ("1.30",), "v1.30.14-eksbuild.28", _KUBE_PROXY_PAGE, "2026-12-04"),
    AddonRelease("coredns", ("1.33", "1.34", "1.35"), "v1.13.2-eksbuild.4", _COREDNS_PAGE, "2026-12-04"),
    AddonRelease("coredns", ("1.30", "1.31", "1.32"), "v1.11.4-eksbuild.33", _COREDNS_PAGE, "2026-12-04"),
    AddonRelease("vpc-cni", tuple(f"1.{m}" for m in range(29, 36)), "v1.21.1-eksbuild.7", _VPC_CNI_PAGE, "2026-12-06"),
    # The default for Kubernetes 1.28-1.35 (TRAINING_OPERATOR_RELEASES).
    AddonRelease(
        "amazon-sagemaker-hyperpod-training-operator",
        tuple(f"1.{m}" for m in range(28, 36)),
        next(r.version for r in TRAINING_OPERATOR_RELEASES if r.default),
        _PR_1076,
        "2026-12-04",
    ),
    # The newest task governance the upgrade page names (v1.6.0-eksbuild.1, Kueue v0.19.2; the page
    # gives no Kubernetes versions), running on a 1.34 cluster in an account read back read-only
    # (EKS keeps an add-on only at a version it publishes for the cluster's version).
    AddonRelease(
        "amazon-sagemaker-hyperpod-taskgovernance",
        ("1.34",),
        "v1.6.0-eksbuild.1",
        f"{TASK_GOVERNANCE_UPGRADE_PAGE} (Upgrade from v1.5 to v1.6); ACTIVE on EKS Kubernetes 1.34 in the read-only "
        "account survey of hi-space/aws-physical-ai-recipes docs/designs/2026-09-16-physical-ai-dashboard.md (commit "
        "f6092cd, 2026-09-16), with Kueue v0.19.2 in its docs/reports/evidence/2026-09-18-ui-infra-audit/hyperpod-review.json",
        "2026-12-06",
    ),
    # What both references deploy on Kubernetes 1.34 and 1.33: the quick setup's
    # cert-manager-template.yaml (CertManagerAddonVersion) beside its eks-template.yaml
    # (KubernetesVersion '1.34'); the awsome Terraform's hyperpod_cluster cert_manager_version,
    # run on 1.34 by its slinky-slurm custom.tfvars and on 1.33 by hyperpod-eks-tf/terraform.tfvars.
    AddonRelease(
        "cert-manager",
        ("1.33", "1.34"),
        "v1.18.2-eksbuild.2",
        "aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/cert-manager-template.yaml and eks-template.yaml "
        "(commit 07829e4); awslabs/awsome-distributed-ai hyperpod-eks-tf/modules/hyperpod_cluster/variables.tf with "
        "slinky-slurm/custom.tfvars (snapshot 95b939c, 2026-07-23)",
        "2026-12-04",
    ),
)

# Older copies of EKS's CoreDNS table, which the current one (ADDON_RELEASES) superseded: a pin
# copied from one goes with the versions that copy lists (EKS may still publish it: preflight asks),
# and with no other version, since each copy lists every Kubernetes version it covers.
_COREDNS_EN_OLDER = f"{_COREDNS_PAGE} (an older English copy, docs.aws.amazon.com, as stored)"
_COREDNS_JA_OLDER = f"{_COREDNS_PAGE} (an older copy, docs.aws.amazon.com/ja_jp, as stored)"
_COREDNS_EN_OLDEST = f"{_COREDNS_PAGE} (the oldest copy stored, docs.aws.amazon.com/en_us)"
SUPERSEDED_ADDON_RELEASES: tuple[AddonRelease, ...] = (
    AddonRelease("coredns", ("1.33", "1.34"), "v1.12.4-eksbuild.1", _COREDNS_EN_OLDER, "2026-12-07"),
    AddonRelease("coredns", ("1.29", "1.30", "1.31", "1.32"), "v1.11.4-eksbuild.24", _COREDNS_EN_OLDER, "2026-12-07"),
    AddonRelease("coredns", ("1.28",), "v1.10.1-eksbuild.38", _COREDNS_EN_OLDER, "2026-12-07"),
    AddonRelease("coredns", ("1.33",), "v1.12.2-eksbuild.4", _COREDNS_JA_OLDER, "2026-12-07"),
    AddonRelease("coredns", ("1.27", "1.28"), "v1.10.1-eksbuild.35", _COREDNS_JA_OLDER, "2026-12-07"),
    AddonRelease("coredns", ("1.26",), "v1.9.3-eksbuild.39", _COREDNS_JA_OLDER, "2026-12-07"),
    AddonRelease("coredns", ("1.29", "1.30"), "v1.11.1-eksbuild.9", _COREDNS_EN_OLDEST, "2026-12-07"),
    AddonRelease("coredns", ("1.24", "1.25", "1.26"), "v1.9.3-eksbuild.15", _COREDNS_EN_OLDEST, "2026-12-07"),
    AddonRelease("coredns", ("1.23",), "v1.8.7-eksbuild.10", _COREDNS_EN_OLDEST, "2026-12-07"),
)


# Add-ons no offline source publishes a version of per Kubernetes version for the default: they
# are left to EKS's default at create (`preflight` asks the account with DescribeAddonVersions,
# `upgrade-plan --from-account` too), never pinned to a guess.
NO_OFFLINE_VERSION = {
    "eks-pod-identity-agent": (
        "the EKS Pod Identity agent pages (pod-id-agent-setup, add-ons-pod-id) publish no version table, and neither "
        "reference pins it; aws/containers-roadmap issue 2684 (2025-11-24) names v1.3.10-eksbuild.1 the default "
        "'in all regions' without the Kubernetes versions it is for, and a third party's Terraform (piksel-ina/terraform-iac "
        "staging/main.tf) sets v1.3.10-eksbuild.2 beside eks-version 1.34, which shows a config, not what EKS accepted"
    ),
    "amazon-sagemaker-hyperpod-observability": (
        "no page or reference read here names a version of it (the quick setup's observability-template.yaml and "
        "the awsome Terraform's modules/observability install it unpinned)"
    ),
    "aws-fsx-csi-driver": "the quick setup's fsx-template.yaml and the awsome Terraform install it unpinned",
}


def offline_addon_release(addon: str, kubernetes: str) -> AddonRelease | None:
    """The row of ADDON_RELEASES for `addon` on Kubernetes `kubernetes`, if any."""
    return next((r for r in ADDON_RELEASES if r.addon == addon and kubernetes in r.kubernetes), None)


# ------------------------------------------------------------------ pins held to the cluster's version
# Kubernetes' version-skew policy: kube-proxy must not be newer than kube-apiserver (and at most
# three minors older); EKS's kube-proxy table pairs each Kubernetes version with a build of that
# same minor (v1.34.x for 1.34), and each EKS build names the minor it was built for.
_SKEW_POLICY = "https://kubernetes.io/releases/version-skew-policy/ (kube-proxy)"


@dataclass(frozen=True)
class PinOffVersion:
    addon: str  # EKS add-on name
    pinned: str
    kubernetes: str
    known: bool  # True: a source says it does not go with `kubernetes` (an error); False: no offline source says
    reason: str


def _semver(version: str) -> tuple[int, ...]:
    """v1.18.2-eksbuild.1 -> (1, 18, 2)"""
    return tuple(int(p) for p in version.lstrip("v").split("-", 1)[0].split("."))


def _line(version: str) -> tuple[int, ...]:
    """v1.13.2-eksbuild.4 -> (1, 13): an add-on's release line."""
    return tuple(int(p) for p in version.lstrip("v").split("-", 1)[0].split(".")[:2])


def pins_off_version(kubernetes: str, pins: Mapping[str, str]) -> list[PinOffVersion]:
    """Each pinned add-on version (`pins`: EKS add-on name -> version) that does not go with
    Kubernetes `kubernetes`, or that no offline source pairs with it. A kube-proxy build is for the
    minor its version names (EKS's kube-proxy table; the version-skew policy); a pin another add-on's
    row in ADDON_RELEASES names (CoreDNS by its release line, as EKS's table lists them) goes with
    that row's versions. Whatever no row settles is unknown here: `preflight` asks the account
    (DescribeAddonVersions), as CreateAddon refuses a version not published for the cluster's."""
    out = []
    for addon, pinned in sorted(pins.items()):
        if addon == "kube-proxy":
            built_for = ".".join(map(str, _line(pinned)))
            if built_for != kubernetes:
                row = offline_addon_release(addon, kubernetes)
                pair = f"; the table's build for {kubernetes} is {row.version}" if row else ""
                out.append(PinOffVersion(addon, pinned, kubernetes, True,
                                         f"is built for Kubernetes {built_for}, not {kubernetes} (sources: {_KUBE_PROXY_PAGE}{pair}; {_SKEW_POLICY})"))
            continue
        if addon == "vpc-cni" and _semver(pinned) < VPC_CNI_MIN_FOR_HYPERPOD:
            out.append(PinOffVersion(addon, pinned, kubernetes, True,
                                     f"is older than {'.'.join(map(str, VPC_CNI_MIN_FOR_HYPERPOD))}, the oldest VPC CNI HyperPod "
                                     f"joins (source: {VPC_CNI_SOURCE})"))
            continue
        rows = [r for r in ADDON_RELEASES if r.addon == addon and (r.version == pinned or (addon == "coredns" and _line(r.version) == _line(pinned)))]
        if rows and any(kubernetes in r.kubernetes for r in rows):
            continue
        older = [r for r in SUPERSEDED_ADDON_RELEASES if r.addon == addon and _line(r.version) == _line(pinned)]
        listed_older = next((r for r in older if kubernetes in r.kubernetes), None)
        current = offline_addon_release(addon, kubernetes)
        if listed_older is not None:
            now = f"; the current copy's build for {kubernetes} is {current.version} ({current.source})" if current else ""
            out.append(PinOffVersion(addon, pinned, kubernetes, False,
                                     f"is of the line an older copy of EKS's table lists for Kubernetes {kubernetes} ({listed_older.version}; "
                                     f"source: {listed_older.source}){now}: preflight asks whether the account still publishes it "
                                     "(DescribeAddonVersions)"))
            continue
        rows += older
        listed = sorted({k for r in rows for k in r.kubernetes}, key=parse)
        # A table that lists every Kubernetes version (CoreDNS's) settles it; a row that only says
        # where a reference ran the pin (cert-manager), or none at all, does not.
        settles = addon == "coredns" and rows and current is not None
        if settles:
            out.append(PinOffVersion(addon, pinned, kubernetes, True,
                                     f"is for Kubernetes {', '.join(listed)}, not {kubernetes}; the table's build for {kubernetes} is "
                                     f"{current.version} (sources: {'; '.join(dict.fromkeys([current.source] + [r.source for r in rows]))})"))
        else:
            where = f"its source lists it for {', '.join(listed)} only" if listed else "no offline source pairs it with any version"
            out.append(PinOffVersion(addon, pinned, kubernetes, False,
                                     f"cannot be known offline to go with Kubernetes {kubernetes} ({where}); preflight asks the account "
                                     "(DescribeAddonVersions)"))
    return out
