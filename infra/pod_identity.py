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


@dataclass(frozen=True)
class WebIdentity:
    role: iam.Role
    policy: iam.ManagedPolicy | None


def web_identity_role(
    scope: Construct,
    cluster: eks.ICluster,
    id_: str,
    *,
    namespace: str,
    service_account: str,
    description: str,
    managed_policies: tuple[str, ...] = (),
    statements: tuple[iam.PolicyStatement, ...] = (),
    role_name: str | None = None,
    also_assumed_by: tuple[iam.IPrincipal, ...] = (),
) -> WebIdentity:
    """A role that `namespace/service_account` assumes through the cluster's IAM OIDC provider
    (IAM roles for service accounts), for a component that documents only that: the inference
    operator add-on takes role ARNs in its configuration and annotates its own service accounts,
    and every source of it trusts sts:AssumeRoleWithWebIdentity (HyperPod's inference
    troubleshooting page, IAM trust relationship issue; the quick setup's
    inference-addon-iam-roles-template.yaml). The provider is `cluster_oidc_provider`'s."""
    provider = cluster_oidc_provider(scope, cluster)
    issuer = provider.open_id_connect_provider_issuer
    # The issuer is known at deploy only, and a condition key cannot be a token: CfnJson.
    subject = cdk.CfnJson(scope, f"{id_}Subject", value={
        f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
        f"{issuer}:aud": "sts.amazonaws.com",
    })
    principal = iam.OpenIdConnectPrincipal(provider, {"StringEquals": subject})
    role = iam.Role(
        scope,
        f"{id_}Role",
        role_name=role_name,
        description=description,
        assumed_by=iam.CompositePrincipal(principal, *also_assumed_by) if also_assumed_by else principal,
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in managed_policies],
    )
    policy = iam.ManagedPolicy(scope, f"{id_}Policy", statements=list(statements), roles=[role]) if statements else None
    return WebIdentity(role, policy)


OIDC_PROVIDER_ID = "ClusterOidcProvider"


def cluster_oidc_provider(scope: Construct, cluster: eks.ICluster) -> eks.OidcProviderNative:
    """The cluster's IAM OIDC provider, made once in `scope`'s stack from the issuer EKS reports
    (DescribeCluster at deploy), not the cluster stack's `open_id_connect_provider`: that would be
    a strong reference from this stack, and switching the feature that needs it off would remove
    an export the deployed stack still imports ("export in use"); the cluster's name, which this
    call reads, is exported either way (stacks/environment.py)."""
    from aws_cdk import custom_resources as cr
    from infra import compliance

    stack = cdk.Stack.of(scope)
    found = stack.node.try_find_child(OIDC_PROVIDER_ID)
    if found is not None:
        return found
    call = cr.AwsSdkCall(service="EKS", action="describeCluster", parameters={"name": cluster.cluster_name},
                         physical_resource_id=cr.PhysicalResourceId.of(f"{OIDC_PROVIDER_ID}-issuer"),
                         output_paths=["cluster.identity.oidc.issuer"])
    issuer = cr.AwsCustomResource(
        stack, f"{OIDC_PROVIDER_ID}Issuer", on_create=call, on_update=call, install_latest_aws_sdk=False,
        policy=cr.AwsCustomResourcePolicy.from_statements([iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])]),
    )
    compliance.acknowledge(issuer, "DescribeCluster on this environment's one cluster, as its inline policy says", "NIST.800.53.R5-IAMNoInlinePolicy")
    stack.acknowledge_sdk_function()
    return eks.OidcProviderNative(stack, OIDC_PROVIDER_ID, url=issuer.get_response_field("cluster.identity.oidc.issuer"))
