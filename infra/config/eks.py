"""The EKS control plane: version, endpoint access, admins, logging and the core add-ons."""

from __future__ import annotations

import importlib.metadata
import ipaddress
import re
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field, field_validator

from infra import naming, versions
from infra.config.base import Model, Problems, collisions, duplicates

if TYPE_CHECKING:
    from infra.config.settings import Settings


LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")


class CoreAddon(Model):
    version: Optional[str] = Field(default=None, pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
    configuration_values: dict[str, Any] = {}


class CoreAddons(Model):
    vpc_cni: CoreAddon = CoreAddon()
    kube_proxy: CoreAddon = CoreAddon()
    coredns: CoreAddon = CoreAddon()
    pod_identity_agent: CoreAddon = CoreAddon()


class EksSettings(Model):
    version: str = Field(default=versions.DEFAULT_EKS_VERSION, pattern=r"^1\.\d{1,2}$")
    cluster_name: Optional[str] = None
    authentication_mode: Literal["API", "API_AND_CONFIG_MAP"] = "API"
    endpoint_access: Literal["public", "private", "public_and_private"] = "public_and_private"
    public_access_cidrs: tuple[ipaddress.IPv4Network, ...] = (ipaddress.IPv4Network("0.0.0.0/0"),)
    admin_principal_arns: tuple[str, ...] = ()
    logging: tuple[Literal["api", "audit", "authenticator", "controllerManager", "scheduler"], ...] = LOG_TYPES
    core_addons: CoreAddons = CoreAddons()

    @field_validator("admin_principal_arns")
    @classmethod
    def _principals(cls, arns):
        for arn in arns:
            session = re.match(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/", arn)
            if session:  # what `aws sts get-caller-identity` prints for a role
                partition, account, role = session.groups()
                raise ValueError(
                    f"{arn!r} is an STS session, which EKS access entries refuse; "
                    f"use the role's ARN, arn:{partition}:iam::{account}:role/{role} (with its path, if any)"
                )
            if not re.match(r"^arn:aws(-cn|-us-gov)?:iam::\d{12}:(role|user)/[\w+=,.@/-]+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)")
        return arns


def check_eks(s: Settings, p: Problems):
    for a, b in collisions(s.eks.admin_principal_arns, lambda arn: naming.admin_entry_id(arn)):
        p.error("eks.admin_principal_arns", b, f"and {a!r} differ only in punctuation, which their access entries' ids drop; list one of them")
    version = versions.parse(s.eks.version)
    if version < versions.MIN_EKS_VERSION or version > versions.MAX_EKS_VERSION:
        p.error(
            "eks.version",
            s.eks.version,
            f"is not allowed; use {versions.fmt(versions.MIN_EKS_VERSION)} to {versions.fmt(versions.MAX_EKS_VERSION)}",
        )
        return
    for line in versions.support_warnings(s.eks.version):
        p.warn(line)
    _, _, package = versions.kubectl_layer_module(s.eks.version)
    try:  # by its distribution, so validation never imports aws_cdk
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        p.error("eks.version", s.eks.version, f"needs the kubectl layer package: pip install {package}")
    if s.eks.endpoint_access == "private" and s.eks.public_access_cidrs not in ((), EksSettings().public_access_cidrs):
        p.error("eks.public_access_cidrs", [str(c) for c in s.eks.public_access_cidrs], "must be empty with endpoint_access 'private'")
    if not s.eks.public_access_cidrs and s.eks.endpoint_access != "private":
        p.error("eks.public_access_cidrs", [], "must list at least one CIDR for a public endpoint")
    for arn in duplicates(s.eks.admin_principal_arns):
        p.error("eks.admin_principal_arns", arn, "is listed twice")
    if not s.eks.admin_principal_arns:
        # CloudFormation's role creates the cluster: with access entries only, nobody else
        # could run kubectl after the deploy.
        p.error(
            "eks.admin_principal_arns",
            [],
            "must name at least one IAM role or user who will run kubectl; find yours with "
            "`aws sts get-caller-identity` (for an assumed-role session, give arn:aws:iam::<account>:role/<role>)",
        )
    if s.eks.endpoint_access != "private" and any(c.prefixlen == 0 for c in s.eks.public_access_cidrs):
        # cdk-nag's EKS1/EKS2 test aws_eks.CfnCluster only and never see aws_eks_v2 clusters.
        line = (
            "the public API endpoint admits 0.0.0.0/0; name your networks' CIDRs, or set endpoint_access 'private'"
        )
        if s.protection.termination_protection:
            p.error("eks.public_access_cidrs", [str(c) for c in s.eks.public_access_cidrs], line + " (required where protection.termination_protection is on)")
        else:
            p.warn(f"eks.public_access_cidrs: {line}")
    if not s.eks.logging:
        p.warn("eks.logging: all control-plane log types are off; audit trails need at least 'audit'")
