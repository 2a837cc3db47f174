"""Kubernetes version support, and which components document which versions.

Kept as data with its sources so a reviewer can check it, and so validation can warn
(not fail) when the chosen version is outside a component's published range.
"""

from __future__ import annotations

from dataclasses import dataclass

# The newest version that HyperPod and every add-on here document (see COMPONENT_RANGES).
# It is in EKS extended support in Dec 2026: the README states the extra cost.
DEFAULT_EKS_VERSION = "1.33"
# Below this, EKS no longer creates clusters at all (1.28/1.29 are past extended support,
# but the package still synthesizes them for accounts on a support exception).
MIN_EKS_VERSION = (1, 28)
# The newest version aws_eks_v2.KubernetesVersion offers in aws-cdk-lib 2.275.
MAX_EKS_VERSION = (1, 36)
# The oldest version in EKS standard support: 1.34 leaves it on 2026-12-02.
OLDEST_STANDARD_SUPPORT = (1, 35)
EKS_SUPPORT_SOURCE = "Amazon EKS Kubernetes release calendar, as of 2026-12-02"


@dataclass(frozen=True)
class ComponentRange:
    component: str
    oldest: tuple[int, int]
    newest: tuple[int, int]
    source: str
    seen: str  # when the source was read


COMPONENT_RANGES: tuple[ComponentRange, ...] = (
    # The English page lists 1.28-1.33; a newer translation lists 1.34 too. The narrower wins.
    ComponentRange(
        "SageMaker HyperPod (EKS orchestrator)",
        (1, 28),
        (1, 33),
        "AWS docs page sagemaker-hyperpod-eks-prerequisites, supported Kubernetes versions",
        "2026-12",
    ),
    ComponentRange(
        "HyperPod training operator add-on",
        (1, 28),
        (1, 33),
        "AWS docs page sagemaker-eks-operator, supported Kubernetes versions",
        "2026-12",
    ),
)

# The training operator documents PyTorch 2.4.0-2.7.1 and Kueue 0.12.x.
TRAINING_OPERATOR_PYTORCH_RANGE = ("2.4.0", "2.7.1")
# Task governance below this is refused by the training operator.
TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR = "v1.3.0-eksbuild.1"
# Topology-aware scheduling needs task governance at least this version.
TASK_GOVERNANCE_MIN_FOR_TOPOLOGY = "v1.2.2"


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
