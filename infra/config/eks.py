"""The EKS control plane: version, endpoint access, admins, logging and the core add-ons; or
an existing cluster HyperPod joins instead (`existing_cluster`)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from infra import versions
from infra.config.base import Model


LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")


# Each block under `eks.core_addons` -> the EKS add-on it installs (stacks/cluster.py).
CORE_ADDON_NAMES = {
    "vpc_cni": "vpc-cni",
    "kube_proxy": "kube-proxy",
    "coredns": "coredns",
    "pod_identity_agent": "eks-pod-identity-agent",
}


class CoreAddon(Model):
    version: Optional[str] = Field(
        default=None, pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$",
        description="Pinned add-on version; unset: EKS's default at create, kept since (a cluster upgrade does not move it).",
    )
    configuration_values: dict[str, Any] = Field(default={}, description="Extra configuration values for the add-on.")


# The VPC CNI's network policy agent, which enforces NetworkPolicies (the team namespaces'
# default deny, the job's own): off unless this configuration value is the string "true"
# (EKS user guide, "Restrict Pod network traffic with Kubernetes network policies").
NETWORK_POLICY_KEY = "enableNetworkPolicy"
NETWORK_POLICY_ON = "true"


class CoreAddons(Model):
    vpc_cni: CoreAddon = Field(
        default=CoreAddon(),
        description="`vpc-cni`; its `env` values and switches are strings (`\"true\"`, not `true`), and its network policy "
        "agent is on (`enableNetworkPolicy: \"true\"`) for the team namespaces' default deny.",
    )
    kube_proxy: CoreAddon = Field(default=CoreAddon(), description="`kube-proxy`.")
    coredns: CoreAddon = Field(default=CoreAddon(), description="`coredns`.")
    pod_identity_agent: CoreAddon = Field(default=CoreAddon(), description="`eks-pod-identity-agent`: credentials for Pod Identity roles.")


class ExistingCluster(Model):
    """An EKS cluster this project does not create: HyperPod joins it. Only what synth needs,
    with no AWS call; `hyperpod-cdk preflight` holds it against HyperPod's prerequisites.
    Its VPC and subnets are network.existing_vpc's."""

    name: str = Field(description="Its name (letters, digits, `-`, `_`; 1-100 characters).")
    security_group_id: str = Field(
        pattern=r"^sg-[0-9a-f]{8,17}$",
        description="The cluster security group EKS made with it, which the control plane's interfaces carry (`aws eks "
        "describe-cluster --query cluster.resourcesVpcConfig.clusterSecurityGroupId`); it gets one ingress rule from the nodes' group.",
    )
    kubectl_role_arn: Optional[str] = Field(
        default=None,
        description="A role of this account the kubectl Lambda runs as, which already has a cluster-admin access entry and "
        "trusts `lambda.amazonaws.com`. Unset: the stack makes the role and gives it that access entry "
        "(`AmazonEKSClusterAdminPolicy`), as the quick setup does for its Helm Lambda on a cluster it did not create.",
    )
    install_pod_identity_agent: bool = Field(
        default=False,
        description="Install the `eks-pod-identity-agent` add-on, for a cluster that lacks it (`preflight` tells); it stays on "
        "the cluster when this environment is destroyed.",
    )


class EksSettings(Model):
    version: str = Field(
        default=versions.DEFAULT_EKS_VERSION, pattern=r"^1\.\d{1,2}$",
        description="Kubernetes version, 1.28-1.36, in quotes; outside a component's documented range is a warning, and 1.34 "
        "and older cost EKS extended support (docs/configuration.md, Kubernetes version and its cost).",
    )
    cluster_name: Optional[str] = Field(
        default=None,
        description="EKS cluster name; unset: `<prefix>-<env>`. Changing it replaces the cluster.",
    )
    upgrade_policy: Literal["STANDARD", "EXTENDED"] = Field(
        default="EXTENDED",
        description="EKS's support tier (`UpgradePolicy.SupportType`). `EXTENDED`: EKS keeps a version past standard support, "
        "at the extended rate, until extended support ends, so the upgrade stays yours. `STANDARD` refuses extended billing: "
        "EKS upgrades the control plane itself when standard support ends (never the add-ons or HyperPod's nodes); only for a "
        "version still in standard support, which EKS cannot take back once the cluster is in extended support.",
    )
    deletion_protection: Optional[bool] = Field(
        default=None,
        description="EKS deletion protection on the cluster (`DeletionProtection`): DeleteCluster, and so `cdk destroy`, is refused "
        "until it is deployed off. Unset: `protection.termination_protection`'s value (on, off in dev).",
    )
    authentication_mode: Literal["API", "API_AND_CONFIG_MAP"] = Field(default="API", description="HyperPod needs one of these two.")
    endpoint_access: Literal["public", "private", "public_and_private"] = Field(
        default="public_and_private", description="Where the Kubernetes API endpoint answers."
    )
    public_access_cidrs: tuple[ipaddress.IPv4Network, ...] = Field(
        default=(ipaddress.IPv4Network("0.0.0.0/0"),),
        description="Blocks allowed to reach a public endpoint (at most 40, no private or reserved ones); empty with `private`.",
    )
    admin_principal_arns: tuple[str, ...] = Field(
        default=(),
        description="IAM roles or users given a cluster-admin access entry: at least one, yours (role ARNs, not the STS "
        "session ARNs `aws sts get-caller-identity` prints). CloudFormation's role creates the cluster, so no one else has access.",
    )
    logging: tuple[Literal["api", "audit", "authenticator", "controllerManager", "scheduler"], ...] = Field(
        default=LOG_TYPES, description="Control-plane log types sent to CloudWatch Logs."
    )
    core_addons: CoreAddons = Field(
        default=CoreAddons(),
        description="The core add-ons the cluster stack installs with the cluster, before any node, all `ResolveConflicts: "
        "OVERWRITE` (on an existing cluster, only the Pod Identity agent, if asked).",
    )
    existing_cluster: Optional[ExistingCluster] = Field(
        default=None,
        description="Join this EKS cluster instead of creating one; `preflight` holds it to HyperPod's prerequisites "
        "(docs/deploying.md, On an existing EKS cluster). Needs `network.existing_vpc` (its VPC); leave out "
        "`cluster_name`, `authentication_mode`, `endpoint_access`, `public_access_cidrs`, `logging` and the core add-on "
        "pins, which the cluster already decides.",
    )

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
        return arns  # their shape, partition and identity: check_access_entries


# Amazon EKS service quotas: "Public endpoint access CIDR ranges per cluster", 40, not
# adjustable. Neither the cluster's CloudFormation schema nor the EKS API model states it.
PUBLIC_ACCESS_CIDRS_MAX = 40
# Source addresses the internet never carries to a public endpoint: RFC 1918, shared address
# space (RFC 6598), loopback and link-local.
NOT_ON_THE_INTERNET = tuple(
    ipaddress.IPv4Network(b) for b in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16")
)


# What an existing cluster already decides: given with one, each would silently do nothing.
NOT_FOR_AN_EXISTING_CLUSTER = (
    "cluster_name", "authentication_mode", "endpoint_access", "public_access_cidrs", "logging", "upgrade_policy", "deletion_protection",
)
