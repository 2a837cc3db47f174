"""The add-ons' rules that span fields: what each needs of the cluster, the ones an existing
cluster already runs, and the version floors a pinned add-on holds the cluster to."""

from __future__ import annotations

from infra import catalogue, prerequisites, versions
from infra.config.addons import AddonsSettings, AddonSwitch, VersionFloor
from infra.config.base import Model, Problems
from infra.config.settings import Settings


def check_addons(s: Settings, p: Problems):
    # What observability and Grafana need beside them (a 4xlarge node, the workspace, SAML's
    # metadata): infra/prerequisites.py.
    a = s.addons
    if a.observability.enabled:
        unsized = [g.name for g in s.hyperpod.instance_groups if catalogue.lookup(g.instance_type) and g.spec.vcpus is None]
        if unsized and not prerequisites.observability_node(s):
            p.warn(
                f"addons.observability.enabled: its collectors need a node of 4xlarge (16 vCPUs) or larger, and the vCPUs "
                f"of group(s) {', '.join(unsized)} are in no source here; this cannot be checked"
            )
        grafana = a.observability.grafana
        if grafana.enabled and "AWS_SSO" in grafana.authentication_providers:
            p.warn(
                "addons.observability.grafana.authentication_providers: AWS_SSO needs IAM Identity Center enabled in "
                f"{s.region} for this account (an organization instance); without it the Grafana workspace fails to create"
            )
    for key in AddonsSettings.model_fields:
        _check_existing(s, f"addons.{key}", getattr(a, key), p)
    _check_existing(s, "inference", s.inference, p)
    for path, name, pinned in s.addon_pins:
        for off in versions.pins_off_version(s.eks.version, {name: pinned}):
            if off.known:
                p.error(path, pinned, off.reason)
            else:
                p.warn(f"{path}: {pinned} {off.reason}")
    for floor in version_floors(s):
        pinned = getattr(a, floor.key).version
        if pinned and not versions.addon_version_at_least(pinned, floor.minimum):
            p.error(f"addons.{floor.key}.version", pinned, f"is older than {floor.minimum}, which {floor.needed_by} needs; use it or newer")
    unpinned = [path for path, switch in tenancy_addons(s) if switch.version is None]
    if unpinned and s.governance.teams and s.protection.termination_protection:
        p.warn(
            f"{', '.join(f'{u}.version' for u in unpinned)}: unset, so each new environment gets EKS's default of the day of "
            "what keeps its teams apart; pin them: hyperpod-cdk upgrade-plan --to "
            f"{s.eks.version} -c env={s.env_name} --from-account --write-pins"
        )


def tenancy_addons(s: Settings) -> list[tuple[str, "AddonSwitch"]]:
    """(config path, switch) of each add-on this deploy installs that tenancy rests on: the VPC
    CNI (its network policy agent), the Pod Identity agent (the jobs' roles, not the node's),
    task governance (Kueue and its webhook: the queues) and observability (its collectors reach
    into team namespaces)."""
    core = [(f"eks.core_addons.{k}", getattr(s.eks.core_addons, k)) for k in ("vpc_cni", "pod_identity_agent")
            if k in s.core_addons_installed]
    return core + [(f"addons.{k}", getattr(s.addons, k)) for k in ("task_governance", "observability")
                   if getattr(s.addons, k).enabled and not getattr(s.addons, k).existing]


def _check_existing(s: Settings, path: str, switch: AddonSwitch, p: Problems) -> None:
    """`existing: true` says the cluster runs the add-on: only on a cluster this project joins,
    only with the add-on on, and with nothing that would configure it (its owner does)."""
    if not switch.existing:
        return
    where = f"{path}.existing"
    if s.eks.existing_cluster is None:
        p.error(where, True, "applies only with eks.existing_cluster: a cluster this project creates runs none of its own add-ons")
    elif not switch.enabled:
        p.error(where, True, f"says the cluster runs it, so the deploy uses it; leave {path}.enabled on (or existing out)")
    for field in sorted(switch.model_fields_set - {"enabled", "existing", "endpoint"}):
        p.error(f"{path}.{field}", getattr(switch, field) if not isinstance(getattr(switch, field), Model) else getattr(switch, field).model_dump(exclude_unset=True),
                "configures an add-on the cluster's owner runs (existing: true); leave it out")


def version_floors(s: Settings) -> list[VersionFloor]:
    """Every floor on the add-ons' versions this config sets, one model for what a pin may be
    (validation) and for what a running add-on must be (preflight, on a cluster that has it)."""
    a, out = s.addons, []
    if a.task_governance.enabled and a.training_operator.enabled:
        out.append(VersionFloor("task_governance", versions.TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR, "the training operator",
                                "AWS docs page sagemaker-eks-operator-troubleshooting, incompatible task governance version"))
    if a.task_governance.enabled and s.topology.mode != "none":
        out.append(VersionFloor("task_governance", versions.TASK_GOVERNANCE_MIN_FOR_TOPOLOGY, f"topology-aware scheduling (topology.mode {s.topology.mode})",
                                "HyperPod's topology-aware scheduling docs: task governance v1.2.2 or later (FACTS, add-ons and their order)"))
    if a.training_operator.enabled and s.sample_job.enabled and s.sample_job.max_nodes is not None:
        out.append(VersionFloor("training_operator", versions.TRAINING_OPERATOR_MIN_FOR_ELASTIC, "elastic training (sample_job.max_nodes)",
                                "AWS docs, Using elastic training in Amazon SageMaker HyperPod"))
    return out
