"""The EKS control plane's rules that span fields: the version and the kubectl layer it needs,
the network policy agent, endpoint access, the admins' and teams' access entries (one per
principal, as IAM and EKS match them: infra/identity.py), an existing cluster; and the VPC
CNI configuration they imply."""

from __future__ import annotations

import importlib.metadata
from typing import Any

from infra import identity, naming, versions
from infra.config.base import Problems, collisions
from infra.config.eks import NETWORK_POLICY_KEY, NETWORK_POLICY_ON, NOT_FOR_AN_EXISTING_CLUSTER, NOT_ON_THE_INTERNET, PUBLIC_ACCESS_CIDRS_MAX
from infra.config.settings import Settings


def vpc_cni_configuration(s: Settings) -> dict[str, Any]:
    """The vpc-cni add-on's configuration values: config's, with the network policy agent on."""
    return {**s.eks.core_addons.vpc_cni.configuration_values, NETWORK_POLICY_KEY: NETWORK_POLICY_ON}


def check_eks(s: Settings, p: Problems):
    if s.eks.existing_cluster:
        check_existing_cluster(s, p)
    check_access_entries(s, p)
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
    if not s.eks.existing_cluster:
        check_support_policy(s, p)
    _, _, package = versions.kubectl_layer_module(s.eks.version)
    try:  # by its distribution, so validation never imports aws_cdk
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        p.error("eks.version", s.eks.version, f"needs the kubectl layer package: pip install {package}")
    if s.eks.existing_cluster:
        return  # the rest is about a control plane this project creates
    given = s.eks.core_addons.vpc_cni.configuration_values.get(NETWORK_POLICY_KEY, NETWORK_POLICY_ON)
    if given != NETWORK_POLICY_ON:
        p.error(
            f"eks.core_addons.vpc_cni.configuration_values.{NETWORK_POLICY_KEY}", given,
            f'must be "{NETWORK_POLICY_ON}" (a string) or left out: the network policy agent enforces the team namespaces\' '
            "default deny and the job's NetworkPolicy, which are inert without it",
        )
    check_endpoint_access(s, p)
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


def check_support_policy(s: Settings, p: Problems) -> None:
    """The support tier and deletion protection a cluster this project creates is given."""
    version, status = s.eks.version, versions.support_status(s.eks.version)
    if s.eks.upgrade_policy == "STANDARD":
        if status != "standard":
            p.error(
                "eks.upgrade_policy", "STANDARD",
                f"cannot apply to Kubernetes {version}, which is past EKS standard support ({versions.EKS_SUPPORT_SOURCE}): "
                f"extended support cannot be refused once a version is in it ({versions.SUPPORT_POLICY_SOURCE}); use 'EXTENDED', "
                f"or an eks.version in standard support ({versions.fmt(versions.OLDEST_STANDARD_SUPPORT)} or newer)",
            )
        else:
            ends = versions.END_OF_STANDARD_SUPPORT.get(version, "the end of its standard support")
            p.warn(
                f"eks.upgrade_policy: STANDARD: EKS upgrades the control plane from {version} itself on {ends}, and not the "
                "add-ons or HyperPod's nodes; upgrade before then (hyperpod-cdk upgrade-plan), or set 'EXTENDED' "
                f"(source: {versions.EKS_SUPPORT_SOURCE}; {versions.SUPPORT_POLICY_SOURCE})"
            )
    if s.eks.deletion_protection is False and s.protection.termination_protection:
        p.warn(
            "eks.deletion_protection: false where protection.termination_protection is on: deleting the stack, or the "
            "cluster by hand, deletes the control plane; leave it unset to follow termination protection"
        )


def check_endpoint_access(s: Settings, p: Problems) -> None:
    """Every combination of endpoint_access and public_access_cidrs either builds or is refused
    in one line. A list config gives is a list given, even when it equals the default."""
    eks, given = s.eks, "public_access_cidrs" in s.eks.model_fields_set
    cidrs = [str(c) for c in eks.public_access_cidrs]
    if eks.endpoint_access == "private":
        if given and cidrs:
            p.error("eks.public_access_cidrs", cidrs, "must be empty with endpoint_access 'private': the endpoint has no public side")
        return
    if not cidrs:
        p.error("eks.public_access_cidrs", [], "must list at least one CIDR for a public endpoint")
        return
    if len(cidrs) > PUBLIC_ACCESS_CIDRS_MAX:
        p.error("eks.public_access_cidrs", cidrs, f"has {len(cidrs)} blocks; EKS takes at most {PUBLIC_ACCESS_CIDRS_MAX} (service quotas, not adjustable)")
    for i, cidr in enumerate(eks.public_access_cidrs):
        if any(cidr.subnet_of(block) for block in NOT_ON_THE_INTERNET):
            p.error(
                f"eks.public_access_cidrs[{i}]", str(cidr),
                "is not a public range: the public endpoint sees public addresses only, and the VPC reaches the private endpoint "
                "(endpoint_access 'public_and_private')",
            )
    if eks.endpoint_access == "public" and cidrs != ["0.0.0.0/0"]:
        # With no private endpoint the nodes, the kubectl provider and the gates come from the
        # NAT gateways' addresses, which exist only after the deploy (and CDK refuses the pair:
        # "Cannot restrict public access to endpoint when private access is disabled").
        p.error(
            "eks.endpoint_access", "public",
            f"cannot be restricted to {', '.join(cidrs)}: without a private endpoint the nodes and the kubectl provider reach "
            "the API from the NAT addresses; use 'public_and_private' to restrict the public side",
        )


def principal(s: Settings, p: Problems, where: str, arn: str, kinds: tuple[identity.Kind, ...] = ("role",)) -> identity.Principal | None:
    """The principal `arn` names (infra/identity.py), of this cluster's partition; None, with
    the problem said, if it names none."""
    try:
        found = identity.parse(arn, kinds)
    except identity.NotAPrincipal as err:
        p.error(where, arn, str(err))
        return None
    if found.partition != naming.partition(s.region):
        p.error(where, arn, f"is in partition {found.partition}; {s.region} is in {naming.partition(s.region)}")
        return None
    return found


def entry_principal(s: Settings, p: Problems, where: str, arn: str, kinds: tuple[identity.Kind, ...] = ("role",)) -> identity.Principal | None:
    """The principal `arn` names, to be given an access entry by this deploy: one of another
    account than the deploy's is taken with a warning. EKS takes it (a STANDARD access entry may
    name another account's principal, EKS user guide, Create access entries), but an example's ARN
    left behind locks its people out."""
    found = principal(s, p, where, arn, kinds)
    if found is not None and found.account != s.account:
        p.warn(f"{where}: {arn!r} is a principal of account {found.account}, not {s.account}, the account this deploys to; "
               "check it is one of yours")
    return found


def check_own_role(s: Settings, p: Problems, where: str, arn: str, runs_as_it: str) -> identity.Principal | None:
    """`arn` names a role of the deploying account and partition (what `runs_as_it` runs as it:
    a role passed to a service is one of its own account). None, with the problem said, if not."""
    found = principal(s, p, where, arn)
    if found is not None and found.account != s.account:
        p.error(where, arn, f"must be a role of account {s.account} in partition {found.partition}: {runs_as_it} runs as it")
        return None
    return found


def check_access_entries(s: Settings, p: Problems) -> None:
    """Every principal a deploy gives an EKS access entry, or finds with one: one entry per
    principal, compared as IAM and EKS compare them (infra/identity.py), whatever the case of
    the name or the path written. The existing cluster's kubectl role has its entry already, and
    HyperPod makes one for an existing execution role."""
    # (field path, principal, the team whose it is), in the order the entries come to be.
    entries: list[tuple[str, identity.Principal, str | None]] = []
    ec = s.eks.existing_cluster
    if ec is not None and ec.kubectl_role_arn is not None:
        found = check_own_role(s, p, "eks.existing_cluster.kubectl_role_arn", ec.kubectl_role_arn, "the kubectl Lambda")
        entries += [("eks.existing_cluster.kubectl_role_arn", found, None)] if found else []
    execution = s.hyperpod.existing_execution_role_arn
    if execution is not None:
        # HyperPod makes the instance groups' role an entry of its own (SageMaker API reference,
        # ClusterMetadata.EksRoleAccessEntries); check_existing_execution_role says what is wrong with it.
        try:
            entries.append(("hyperpod.existing_execution_role_arn", identity.parse(execution), None))
        except identity.NotAPrincipal:
            pass
    for i, arn in enumerate(s.eks.admin_principal_arns):
        found = entry_principal(s, p, f"eks.admin_principal_arns[{i}]", arn, ("role", "user"))
        entries += [(f"eks.admin_principal_arns[{i}]", found, None)] if found else []
    for a, b in collisions(s.eks.admin_principal_arns, naming.admin_entry_id):
        p.error("eks.admin_principal_arns", b, f"and {a!r} differ only in punctuation, which their access entries' ids drop; list one of them")
    for i, team in enumerate(s.governance.teams):
        for j, arn in enumerate(team.principals):
            found = entry_principal(s, p, f"governance.teams[{i}].principals[{j}]", arn)
            entries += [(f"governance.teams[{i}].principals[{j}]", found, team.name)] if found else []
        for a, b in collisions(team.principals, lambda arn: naming.team_entry_id(team.name, arn)):
            p.error(f"governance.teams[{i}].principals", b, f"and {a!r} differ only in punctuation, which their access entries' ids drop; list one of them")
    made_elsewhere = {
        "eks.existing_cluster.kubectl_role_arn": f"which already has an access entry on {ec.name if ec else ''}",
        "hyperpod.existing_execution_role_arn": "the nodes' role, which HyperPod gives an access entry itself",
    }
    first: dict[tuple, tuple[str, identity.Principal, str | None]] = {}
    for where, found, team in entries:
        if found.key not in first:
            first[found.key] = (where, found, team)
            continue
        there, earlier, their_team = first[found.key]
        if there in made_elsewhere:
            said = f"is {there}, {made_elsewhere[there]}"
        elif found.arn != earlier.arn:
            said = f"names the same {found.kind} as {there} ({earlier.arn!r}): IAM compares {found.kind} names without case and whatever their path"
        elif where.rsplit("[", 1)[0] == there.rsplit("[", 1)[0]:
            said = f"is listed twice (also {there})"
        else:
            said = f"is also {there}"
        if their_team is not None and their_team != team:
            said += f", a principal of team {their_team}: one team each"
        p.error(where, found.arn, f"{said}; EKS gives a principal one access entry" + (": leave it out" if there in made_elsewhere else ""))


def check_existing_cluster(s: Settings, p: Problems) -> None:
    from infra import cfn_schema

    ec, where = s.eks.existing_cluster, "eks.existing_cluster"
    if not s.network.existing_vpc:
        p.error(
            where, ec.name,
            "needs network.existing_vpc: the cluster's VPC and private subnets (for the kubectl Lambda and the gates), "
            "which this project then does not create",
        )
    rule = cfn_schema.resource("AWS::EKS::Cluster")["properties"]["Name"]
    # The schema's pattern (and botocore's) has no end anchor; CreateCluster's reference says
    # the name "can contain only alphanumeric characters, hyphens, and underscores".
    rule = {**rule, "pattern": rule["pattern"].removesuffix("$") + "$"}
    if not cfn_schema.matches(rule, ec.name):
        p.error(
            f"{where}.name", ec.name,
            f"is not an EKS cluster name: letters, digits, '-' and '_', starting with a letter or digit, "
            f"{rule['minLength']}-{rule['maxLength']} characters",
        )
    for field in NOT_FOR_AN_EXISTING_CLUSTER:
        if field in s.eks.model_fields_set:
            p.error(f"eks.{field}", getattr(s.eks, field), f"has no effect with {where}, whose control plane is already set; leave it out")
    for name in ("vpc_cni", "kube_proxy", "coredns"):
        if name in s.eks.core_addons.model_fields_set:
            given = getattr(s.eks.core_addons, name).model_dump(exclude_unset=True)
            p.error(f"eks.core_addons.{name}", given, f"configures an add-on this project does not install on {where}, which runs its own; leave it out")
    if "pod_identity_agent" in s.eks.core_addons.model_fields_set and not ec.install_pod_identity_agent:
        given = s.eks.core_addons.pod_identity_agent.model_dump(exclude_unset=True)
        p.error("eks.core_addons.pod_identity_agent", given, f"applies only with {where}.install_pod_identity_agent true")
