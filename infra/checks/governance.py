"""Task governance's rules that span fields: teams and their quotas against the cluster's
capacity (as the admission model counts it: infra/admission.py), topology-aware scheduling,
the queue-label policy."""

from __future__ import annotations

from infra import admission, catalogue, naming
from infra.config.base import Problems, collisions, duplicates
from infra.config.governance import QUEUE_LABEL, QUEUE_POLICY_SINCE, TOPOLOGY_LEVELS, QuotaResource, Team
from infra.config.settings import Settings


def check_governance(s: Settings, p: Problems):
    g = s.governance
    for name in duplicates(pc.name for pc in g.priority_classes):
        p.error("governance.priority_classes", name, "is defined twice")
    for i, pc in enumerate(g.priority_classes):
        if not naming.K8S_LABEL.match(naming.priority_class_name(pc.name)) or len(naming.priority_class_name(pc.name)) > naming.K8S_LABEL_MAX:
            p.error(f"governance.priority_classes[{i}].name", pc.name, "must be lowercase letters, digits and hyphens (it becomes <name>-priority)")
    if (g.teams or g.priority_classes) and not s.addons.task_governance.enabled:
        p.error("addons.task_governance.enabled", False, "must be true when governance.teams or priority_classes are set")
    for name in duplicates(t.name for t in g.teams):
        p.error("governance.teams", name, "is defined twice")
    for a, b in collisions([t.name for t in g.teams], naming.construct_key):
        p.error("governance.teams", b, f"and {a!r} differ only in punctuation, which CloudFormation logical ids drop; rename one")
    capacity = s.resource_capacity()
    sound_teams = []
    seen: set[str] = set()
    for i, team in enumerate(g.teams):
        if team.name in seen:
            continue  # a team defined twice is one line (above): its second copy's fields would say the first's again
        seen.add(team.name)
        path = f"governance.teams[{i}]"
        _check_team_name(s, team, path, p)
        if team.borrow_limit is not None and team.sharing != "LendAndBorrow":
            p.error(f"{path}.borrow_limit", team.borrow_limit, "applies only with sharing 'LendAndBorrow'")
        if team.absolute_borrow_limits and team.sharing != "LendAndBorrow":
            p.error(f"{path}.absolute_borrow_limits", len(team.absolute_borrow_limits), "apply only with sharing 'LendAndBorrow'")
        sound = True
        for field, entries in (("quotas", team.quotas), ("absolute_borrow_limits", team.absolute_borrow_limits)):
            for itype in duplicates(q.instance_type for q in entries):
                p.error(f"{path}.{field}", itype, "is listed twice; SageMaker takes one entry per instance type")
                sound = False
            for j, q in enumerate(entries):
                sound = _check_quota_entry(s, q, f"{path}.{field}[{j}]", capacity, p) and sound
        if sound:
            sound_teams.append(team)
    # Per instance type, the first kind the teams' quotas together take more of than the groups
    # have (whole instances first, memory last): one line a type.
    for over in admission.oversubscribed(sound_teams, capacity):
        if over.have < 0:
            continue  # a group's count below 0 is refused on its own line
        spec = catalogue.lookup(over.instance_type)
        teams = ", ".join(t for t, n in over.asks if n)
        line = (f"governance.teams: quotas for {over.instance_type} add up to {admission.amount(over.kind, over.total, spec)}, "
                f"above the cluster's {admission.amount(over.kind, over.have, spec)} (teams: {teams})")
        if g.allow_oversubscription:
            p.warn(line + "; allowed by governance.allow_oversubscription")
        else:
            p.errors.append(line + "; set governance.allow_oversubscription to intend it")
    _check_queue_policy(s, p)
    if not g.fair_share:
        for i, team in enumerate(g.teams):
            if "fair_share_weight" in team.model_fields_set:
                # SageMaker API reference, ComputeQuotaTarget.FairShareWeight: "only used when FairShare is enabled".
                p.warn(f"governance.teams[{i}].fair_share_weight: {team.fair_share_weight} is used only when FairShare is enabled "
                       "(SageMaker API reference, ComputeQuotaTarget); with governance.fair_share false, teams borrow idle compute "
                       "first come, first served")
    t = s.topology
    if t.level not in TOPOLOGY_LEVELS:
        p.error("topology.level", t.level, f"is not a topology level; allowed: {', '.join(TOPOLOGY_LEVELS)}")
    if t.mode != "none" and t.level == "topology.k8s.aws/ultraserver-id":
        for i, grp in enumerate(s.hyperpod.instance_groups):
            spec = catalogue.lookup(grp.instance_type)
            if spec and spec.is_accelerated and not spec.ultraserver:
                line = f"{grp.instance_type} (hyperpod.instance_groups[{i}]) is not an UltraServer type, so its nodes have no ultraserver-id label"
                if t.mode == "required":
                    p.error("topology.level", t.level, f"is required but {line}; use a network-node layer")
                else:
                    p.warn(f"topology.level: {t.level} is preferred but {line}; jobs are placed without it")
    if t.mode == "required":
        for i, grp in enumerate(s.hyperpod.instance_groups):
            spec = catalogue.lookup(grp.instance_type)
            if spec and spec.is_accelerated and not spec.topology:
                p.error(
                    "topology.mode",
                    "required",
                    f"but hyperpod.instance_groups[{i}] ({grp.instance_type}) has no EC2 topology labels (its exact type is not in "
                    "EC2's instance topology prerequisites), so its pods never schedule; use 'preferred'",
                )


def _check_team_name(s: Settings, team: Team, path: str, p: Problems) -> None:
    names = naming.team_names(team.name)
    if not naming.SAGEMAKER_NAME.match(team.name) or not naming.K8S_LABEL.match(team.name) or len(names.cluster_queue) > naming.K8S_LABEL_MAX:
        p.error(
            f"{path}.name",
            team.name,
            f"must be lowercase letters, digits and hyphens, short enough that {names.cluster_queue!r} is at most 63 characters",
        )
        return  # the quota name below is made of it: that line would only repeat this one
    quota_name = f"{s.prefix}-{s.env_name}-{team.name}"
    if not naming.SAGEMAKER_NAME.match(quota_name):
        p.error(f"{path}.name", team.name, f"makes compute-quota name {quota_name!r}, which breaks SageMaker's name rule "
                "(1-63 letters, digits and hyphens)")


def _meant_by_a_misspelt_group(s: Settings, instance_type: str) -> bool:
    """Whether a group's type is no type HyperPod takes and reads like `instance_type` misspelt:
    the group's line (with its "did you mean") is the one problem, not every quota of the type."""
    import difflib

    unknown = [g.instance_type for g in s.hyperpod.instance_groups if catalogue.lookup(g.instance_type) is None]
    return any(difflib.get_close_matches(t, [instance_type], n=1, cutoff=0.8) for t in unknown)


def _check_quota_entry(s: Settings, q: QuotaResource, path: str, capacity: dict, p: Problems) -> bool:
    """One entry against its type's groups: whether it is sound."""
    if q.instance_type not in capacity:
        if not _meant_by_a_misspelt_group(s, q.instance_type):  # else the group's own line says it, once
            p.error(f"{path}.instance_type", q.instance_type, f"is provided by no instance group; groups have: {', '.join(sorted(capacity))}")
        return False
    given = q.given()
    shown = q.model_dump(exclude_none=True, exclude={"instance_type"})
    if not given:
        p.error(path, q.instance_type, "needs count, or any of accelerators, vcpu, memory_gib and accelerator_partition")
        return False
    if "count" in given and len(given) > 1:
        p.error(path, shown, "count is whole instances; give it alone, or the other kinds without it")
        return False
    have = {kind: n for kind, n in capacity[q.instance_type].items() if n is not None}
    unknown = [kind for kind in given if kind not in have and kind in capacity[q.instance_type]]
    for kind in unknown:
        # The type's figure is in no source here: SageMaker judges it at deploy, this cannot.
        p.warn(f"{path}.{_field(kind)}: {given[kind]:g} cannot be checked against {q.instance_type}, whose {kind} no source here states")
    if unknown:
        return False
    problems = len(p.errors)
    for kind, amount in given.items():
        if amount <= 0:
            p.error(f"{path}.{_field(kind)}", amount, "must be above 0")
        elif kind.startswith("mig-") and not have.get(kind):
            profiles = sorted(k for k in have if k.startswith("mig-"))
            where = f"the groups of {q.instance_type} are cut into {', '.join(profiles)}" if profiles else f"no group of {q.instance_type} has a mig_profile"
            p.error(f"{path}.accelerator_partition.type", kind, f"names slices the cluster does not have: {where}")
        elif kind == "accelerators" and not have.get(kind):
            why = "are all cut into MIG slices; ask for accelerator_partition" if any(k.startswith("mig-") for k in have) else "has no accelerators; use count, vcpu or memory_gib"
            p.error(f"{path}.accelerators", amount, f"but {q.instance_type} {why}")
        elif have.get(kind, 0) < 0:
            continue  # a group's count below 0 is refused on its own line; a share of it would say it again
        elif amount > have.get(kind, 0) + 1e-9:
            p.error(f"{path}.{_field(kind)}", amount, f"is more than the cluster's {admission.amount(kind, have.get(kind, 0), catalogue.lookup(q.instance_type))} of {q.instance_type}")
    return len(p.errors) == problems


def _field(kind: str) -> str:
    return "accelerator_partition.count" if kind.startswith("mig-") else kind


def queue_label_enforced(s: Settings) -> bool:
    from infra import versions

    return bool(s.governance.teams) and versions.parse(s.eks.version) >= QUEUE_POLICY_SINCE


def _check_queue_policy(s: Settings, p: Problems) -> None:
    """Below 1.30 a team's job without its queue label is not refused, and runs outside its
    team's quota."""
    if s.governance.teams and not queue_label_enforced(s):
        since = ".".join(map(str, QUEUE_POLICY_SINCE))
        p.warn(
            f"eks.version: {s.eks.version} has no ValidatingAdmissionPolicy (GA in {since}), so a team's job without the label "
            f"{QUEUE_LABEL} is not refused and runs outside its team's quota; use {since} or later"
        )
