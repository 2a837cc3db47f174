"""eks.existing_cluster: the EKS cluster the deploy goes onto, against HyperPod's EKS
prerequisites (version, authentication mode, VPC CNI and its network policy agent) and
against what the deploy would create on it (add-ons, access entries, the dependencies
chart)."""

from __future__ import annotations

from cli.preflight.base import Clients, Result, error_code
from infra import identity
from infra.config import Settings


def _semver(version: str) -> tuple[int, int, int] | None:
    import re

    found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(n) for n in found.groups()) if found else None


def check_existing_cluster(settings: Settings, aws: Clients) -> list[Result]:
    """eks.existing_cluster against HyperPod's EKS prerequisites, and against what the deploy
    will create on it: one line per requirement, each failure with what to do."""
    from addons import registry
    from addons.base import ManagedAddon
    from infra import versions

    ec = settings.eks.existing_cluster
    if ec is None:
        return []
    eks, name = aws("eks"), ec.name
    try:
        cluster = eks.describe_cluster(name=name)["cluster"]
    except Exception as err:  # noqa: BLE001
        if error_code(err) != "ResourceNotFoundException":
            raise
        return [Result("EKS cluster", "fail", f"no EKS cluster named {name} in {aws.region}", "fix eks.existing_cluster.name (aws eks list-clusters)")]
    results = [
        Result("EKS cluster", "pass", f"{name} is {cluster.get('status', 'UNKNOWN')}")
        if cluster.get("status") == "ACTIVE"
        else Result("EKS cluster", "warn", f"{name} is {cluster.get('status', 'UNKNOWN')}", "deploy once it is ACTIVE")
    ]
    hyperpod = next(r for r in versions.COMPONENT_RANGES if r.component.startswith("SageMaker HyperPod"))
    running = cluster.get("version", "")
    if running != settings.eks.version:
        results.append(Result("EKS cluster version", "fail", f"{name} runs Kubernetes {running}, config says {settings.eks.version}",
                              f"set eks.version to \"{running}\": the kubectl layer and the add-on versions follow it"))
    elif not hyperpod.oldest <= versions.parse(running) <= hyperpod.newest:
        results.append(Result("EKS cluster version", "fail",
                              f"{running} is outside what HyperPod supports ({versions.fmt(hyperpod.oldest)}-{versions.fmt(hyperpod.newest)})",
                              f"upgrade {name} into that range ({hyperpod.source})"))
    else:
        results.append(Result("EKS cluster version", "pass", f"{running}, which HyperPod supports"))
    mode = cluster.get("accessConfig", {}).get("authenticationMode", "CONFIG_MAP")
    results.append(
        Result("EKS authentication mode", "pass", mode)
        if mode in ("API", "API_AND_CONFIG_MAP")
        else Result("EKS authentication mode", "fail", f"{mode}: HyperPod and access entries need API or API_AND_CONFIG_MAP",
                    f"aws eks update-cluster-config --name {name} --access-config authenticationMode=API_AND_CONFIG_MAP")
    )
    vpc_config, ev = cluster.get("resourcesVpcConfig", {}), settings.network.existing_vpc
    if ev is not None and vpc_config.get("vpcId") != ev.vpc_id:
        results.append(Result("EKS cluster VPC", "fail", f"{name} is in {vpc_config.get('vpcId')}, network.existing_vpc is {ev.vpc_id}",
                              "set network.existing_vpc to the cluster's VPC"))
    group = vpc_config.get("clusterSecurityGroupId")
    if group != ec.security_group_id:
        results.append(Result("EKS cluster security group", "fail", f"{name}'s cluster security group is {group}, config says {ec.security_group_id}",
                              f"set eks.existing_cluster.security_group_id to {group}"))
    installed = set(eks.list_addons(clusterName=name).get("addons", []))
    # VPC CNI: the only CNI HyperPod supports, at a minimum version.
    floor = ".".join(map(str, versions.VPC_CNI_MIN_FOR_HYPERPOD))
    if "vpc-cni" in installed:
        addon = eks.describe_addon(clusterName=name, addonName="vpc-cni")["addon"]
        cni = addon["addonVersion"]
        results.append(
            Result("VPC CNI", "pass", f"{cni} (HyperPod needs {floor} or later)")
            if (_semver(cni) or (0, 0, 0)) >= versions.VPC_CNI_MIN_FOR_HYPERPOD
            else Result("VPC CNI", "fail", f"{cni} is older than {floor}, which HyperPod needs ({versions.VPC_CNI_SOURCE})",
                        f"aws eks update-addon --cluster-name {name} --addon-name vpc-cni --addon-version <{floor} or later>")
        )
        results.append(_network_policy(name, addon.get("configurationValues") or "{}"))
    else:
        results.append(Result("VPC CNI", "warn", f"not an EKS add-on on {name}: a self-managed aws-node must be {floor} or later",
                              "kubectl -n kube-system get daemonset aws-node -o jsonpath='{..image}'"))
        results.append(Result("VPC CNI network policy", "warn",
                              f"not an EKS add-on on {name}: its network policy agent must run with --enable-network-policy=true, "
                              "or the team namespaces' NetworkPolicies are not enforced",
                              "kubectl -n kube-system get daemonset aws-node -o jsonpath='{..args}'"))
    agent = "eks-pod-identity-agent"
    if ec.install_pod_identity_agent:
        results.append(
            Result("Pod Identity agent", "fail", f"already installed on {name}: a second CreateAddon fails", "set eks.existing_cluster.install_pod_identity_agent false")
            if agent in installed
            else Result("Pod Identity agent", "pass", "not installed yet; the deploy installs it")
        )
    else:
        results.append(
            Result("Pod Identity agent", "pass", f"installed on {name}")
            if agent in installed
            else Result("Pod Identity agent", "fail", f"missing on {name}: the training operator, observability and the job's role need it",
                        f"set eks.existing_cluster.install_pod_identity_agent true, or aws eks create-addon --cluster-name {name} --addon-name {agent}")
        )
    for addon in registry.plan(settings):
        if isinstance(addon, ManagedAddon) and (addon.existing or addon.eks_name in installed):
            results.append(_existing_addon(settings, addon, installed, eks))
    entries = eks.list_access_entries(clusterName=name).get("accessEntries", [])
    # The principals the deploy gives an entry, matched as IAM and EKS match them (infra/identity.py).
    given = [("eks.admin_principal_arns", arn) for arn in settings.eks.admin_principal_arns]
    given += [(f"governance.teams[{i}].principals", arn) for i, t in enumerate(settings.governance.teams) for arn in t.principals]
    for field, arn in given:
        entry = next((e for e in entries if identity.same(arn, e)), None)
        if entry is not None:
            results.append(Result(f"access entry {arn.rsplit('/', 1)[-1]}", "fail", f"{arn} already has an access entry on {name} ({entry}): a second one fails",
                                  f"leave it out of {field} (it has access already)"))
    if ec.kubectl_role_arn and not any(identity.same(ec.kubectl_role_arn, e) for e in entries):
        results.append(Result("kubectl role", "fail", f"{ec.kubectl_role_arn} has no access entry on {name}: the chart's install would be refused",
                              f"aws eks create-access-entry --cluster-name {name} --principal-arn {ec.kubectl_role_arn}, then associate "
                              "AmazonEKSClusterAdminPolicy; or leave kubectl_role_arn out and the stack makes one"))
    results.append(_existing_chart(settings, aws))
    return results


def _network_policy(cluster: str, values: str) -> Result:
    """The cluster's own VPC CNI add-on enforces NetworkPolicies only with its network policy
    agent on; this project does not configure a VPC CNI it did not install."""
    import yaml

    from infra.config.eks import NETWORK_POLICY_KEY, NETWORK_POLICY_ON

    try:  # EKS takes configuration values as JSON or YAML
        given = yaml.safe_load(values).get(NETWORK_POLICY_KEY)
    except (yaml.YAMLError, AttributeError):
        given = None
    if given == NETWORK_POLICY_ON:
        return Result("VPC CNI network policy", "pass", f"{NETWORK_POLICY_KEY} is \"{NETWORK_POLICY_ON}\"")
    return Result(
        "VPC CNI network policy", "fail",
        f"{NETWORK_POLICY_KEY} is {given!r} on {cluster}'s vpc-cni add-on: the team namespaces' and the job's NetworkPolicies "
        "would not be enforced, and every team's pods could reach every other's",
        f"aws eks update-addon --cluster-name {cluster} --addon-name vpc-cni --configuration-values "
        f"'{{\"{NETWORK_POLICY_KEY}\": \"{NETWORK_POLICY_ON}\"}}' (merged with its other values)",
    )


def _existing_addon(settings: Settings, addon, installed: set[str], eks) -> Result:
    """One line for an EKS add-on the deploy would create that the cluster has (what config
    should say), or one config adopts (there, and at a version what needs it accepts)."""
    from infra.checks.addons import version_floors
    from infra import versions

    name, check, key = settings.eks_cluster_name, f"add-on {addon.eks_name}", addon.config_path
    if addon.eks_name not in installed:
        return Result(check, "fail", f"{key}.existing is true, but {name} has no {addon.eks_name} add-on",
                      f"set {key}.existing false (or leave it out), and the deploy installs it")
    found = eks.describe_addon(clusterName=name, addonName=addon.eks_name)["addon"]
    running, status = found.get("addonVersion", "?"), found.get("status", "UNKNOWN")
    if not addon.existing:
        return Result(check, "fail", f"{name} already runs it ({running}): the addons stack's CreateAddon would fail",
                      f"set {key}.existing: true to use it")
    floors = [f for f in version_floors(settings) if f.key == addon.key]
    short = [f for f in floors if not versions.addon_version_at_least(running, f.minimum)]
    if short:
        f = short[0]
        return Result(check, "fail", f"{running} is older than {f.minimum}, which {f.needed_by} needs ({f.source})",
                      f"have its owner update it: aws eks update-addon --cluster-name {name} --addon-name {addon.eks_name} "
                      f"--addon-version <{f.minimum} or newer>{_migration_note(running, addon.eks_name)}")
    accepts = "; ".join(f"{f.needed_by} needs {f.minimum} or newer" for f in floors) or "nothing here asks for a version of it"
    if status != "ACTIVE":
        return Result(check, "warn", f"adopted: {running}, {status}", f"aws eks describe-addon --cluster-name {name} --addon-name {addon.eks_name}")
    return Result(check, "pass", f"adopted: {running} ({accepts})")


def _migration_note(running: str, addon: str) -> str:
    """Where an update of task governance out of v1.3.x crosses the Kueue CRD migration."""
    from infra import versions

    if addon != "amazon-sagemaker-hyperpod-taskgovernance" or versions.addon_version_at_least(running, versions.TASK_GOVERNANCE_CRD_MIGRATION):
        return ""
    return f"; to {versions.TASK_GOVERNANCE_CRD_MIGRATION} or later only through the migration: {versions.TASK_GOVERNANCE_MIGRATION_WAYS}"


# What the quick setup's helm-chart-template.yaml takes (HelmRelease, Namespace, EKSClusterName)
# and answers (HelmChartDeploymentComplete): its stack is how the account shows the release.
QUICK_SETUP_CHART_OUTPUT = "HelmChartDeploymentComplete"


def _existing_chart(settings: Settings, aws: Clients) -> Result:
    """The HyperPod dependencies chart the quick setup installed on the cluster: a second
    release of it fails on the objects the first owns ("invalid ownership metadata"); the same
    release name makes the deploy upgrade it in place (helm upgrade --install)."""
    name, ours = settings.eks_cluster_name, settings.hyperpod.helm_chart.release
    check = "dependencies chart"
    for page in aws("cloudformation").get_paginator("describe_stacks").paginate():
        for stack in page["Stacks"]:
            params = {p["ParameterKey"]: p.get("ParameterValue") for p in stack.get("Parameters", [])}
            outputs = {o["OutputKey"] for o in stack.get("Outputs", [])}
            if params.get("EKSClusterName") != name or "HelmRelease" not in params or QUICK_SETUP_CHART_OUTPUT not in outputs:
                continue
            release, namespace = params["HelmRelease"], params.get("Namespace", "kube-system")
            where = f"release {release} in {namespace} (stack {stack['StackName']})"
            if namespace != "kube-system":
                return Result(check, "fail", f"{name} runs the HyperPod dependencies chart as {where}; HyperPod's must be in kube-system",
                              f"have its owner remove it (helm uninstall {release} -n {namespace}) before this deploy installs it in kube-system")
            if release != ours:
                return Result(check, "fail", f"{name} runs the HyperPod dependencies chart as {where}: a second release of it fails on the objects the first owns",
                              f"set hyperpod.helm_chart.release to \"{release}\": the deploy then upgrades that release to this revision and values")
            return Result(check, "warn", f"the deploy upgrades {where} to revision {settings.hyperpod.helm_chart.revision[:12]}",
                          "destroying this environment uninstalls that release too, and the cluster's other workloads lose its device plugins")
    return Result(check, "pass", f"no quick-setup stack installed the chart on {name} (a release installed by hand shows in `helm list -n kube-system`)")
