"""Pod Identity roles: shared by the add-ons and the sample job."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct


@dataclass(frozen=True)
class PodIdentity:
    role: iam.Role
    association: eks.CfnPodIdentityAssociation
    policy: iam.ManagedPolicy | None


def pod_identity_role(
    scope: Construct,
    cluster: eks.ICluster,
    id_: str,
    *,
    namespace: str,
    service_account: str,
    description: str,
    managed_policies: tuple[str, ...] = (),
    statements: tuple[iam.PolicyStatement, ...] = (),
) -> "PodIdentity":
    """A role that only Pod Identity in this account and this cluster may assume, and its
    standalone association with `namespace/service_account`.

    Standalone, not the add-on's inline `podIdentityAssociations`: the training operator
    add-on (v1.2.1) rejects inline associations, and one shape for all keeps it simple.
    """
    account = cdk.Stack.of(scope).account
    role = iam.Role(
        scope,
        f"{id_}Role",
        description=description,
        # Pod Identity tags its sessions (namespace, service account): sts:TagSession too.
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com")
        .with_conditions(
            {"StringEquals": {"aws:SourceAccount": account}, "ArnEquals": {"aws:SourceArn": cluster.cluster_arn}}
        )
        .with_session_tags(),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in managed_policies],
    )
    # A customer-managed policy, not an inline one: reviewable on its own, and grants
    # (bucket.grant_read_write(policy)) can be added to it later.
    policy = iam.ManagedPolicy(scope, f"{id_}Policy", statements=list(statements), roles=[role]) if statements else None
    association = eks.CfnPodIdentityAssociation(
        scope,
        f"{id_}PodIdentity",
        cluster_name=cluster.cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.role_arn,
    )
    return PodIdentity(role, association, policy)
