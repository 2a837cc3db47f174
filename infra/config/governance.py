"""Task governance: priority classes, teams and their quotas, topology-aware scheduling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field

from infra import catalogue, naming
from infra.config.base import Model, Problems, collisions, duplicates

if TYPE_CHECKING:
    from infra.config.settings import Settings


TOPOLOGY_LEVELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/ultraserver-id",
)


class PriorityClass(Model):
    name: str
    weight: int


class QuotaResource(Model):
    instance_type: str
    count: Optional[int] = None
    accelerators: Optional[int] = None


class Team(Model):
    name: str
    quotas: tuple[QuotaResource, ...] = Field(min_length=1)
    sharing: Literal["Lend", "DontLend", "LendAndBorrow"] = "LendAndBorrow"
    # Percent of the team's quota it may borrow from idle capacity (LendAndBorrow only).
    borrow_limit: Optional[int] = None
    preempt: Literal["Never", "LowerPriority"] = "LowerPriority"
    # Its range, as every mapped field's, comes from the schema (infra/config/limits.py).
    fair_share_weight: int = 50
    active: bool = True


class GovernanceSettings(Model):
    priority_classes: tuple[PriorityClass, ...] = ()
    fair_share: bool = True
    idle_resource_sharing: bool = True
    # Teams' quotas may add up to more than the cluster has (they borrow from each other).
    allow_oversubscription: bool = False
    teams: tuple[Team, ...] = ()


class TopologySettings(Model):
    mode: Literal["none", "preferred", "required"] = "none"
    level: str = "topology.k8s.aws/network-node-layer-3"


def check_governance(s: Settings, p: Problems):
    g = s.governance
    for name in duplicates(pc.name for pc in g.priority_classes):
        p.error("governance.priority_classes", name, "is defined twice")
    for i, pc in enumerate(g.priority_classes):
        if not naming.K8S_LABEL.match(naming.priority_class_name(pc.name)) or len(naming.priority_class_name(pc.name)) > naming.K8S_LABEL_MAX:
            p.error(f"governance.priority_classes[{i}].name", pc.name, "must be lowercase letters, digits and hyphens (it becomes <name>-priority)")
    if (g.teams or g.priority_classes) and not s.addons.task_governance.enabled:
        p.error("addons.task_governance.enabled", False, "must be true when governance.teams or priority_classes are set")
    capacity = s.capacity()
    for name in duplicates(t.name for t in g.teams):
        p.error("governance.teams", name, "is defined twice")
    for a, b in collisions([t.name for t in g.teams], naming.construct_key):
        p.error("governance.teams", b, f"and {a!r} differ only in punctuation, which CloudFormation logical ids drop; rename one")
    demand: dict[str, list[tuple[str, int]]] = {}
    for i, team in enumerate(g.teams):
        path = f"governance.teams[{i}]"
        names = naming.team_names(team.name)
        if not naming.SAGEMAKER_NAME.match(team.name) or not naming.K8S_LABEL.match(team.name) or len(names.cluster_queue) > naming.K8S_LABEL_MAX:
            p.error(
                f"{path}.name",
                team.name,
                f"must be lowercase letters, digits and hyphens, short enough that {names.cluster_queue!r} is at most 63 characters",
            )
        quota_name = f"{s.prefix}-{s.env_name}-{team.name}"
        if not naming.SAGEMAKER_NAME.match(quota_name):
            p.error(f"{path}.name", team.name, f"makes compute-quota name {quota_name!r}, longer than 63 characters")
        if team.borrow_limit is not None and team.sharing != "LendAndBorrow":
            p.error(f"{path}.borrow_limit", team.borrow_limit, "applies only with sharing 'LendAndBorrow'")
        for itype in duplicates(q.instance_type for q in team.quotas):
            p.error(f"{path}.quotas", itype, "is listed twice in one team's quota; SageMaker takes one entry per instance type")
        for j, q in enumerate(team.quotas):
            qpath = f"{path}.quotas[{j}]"
            if q.instance_type not in capacity:
                p.error(f"{qpath}.instance_type", q.instance_type, f"is provided by no instance group; groups have: {', '.join(sorted(capacity))}")
                continue
            if (q.count is None) == (q.accelerators is None):
                p.error(qpath, q.model_dump(exclude_none=True), "needs exactly one of count or accelerators")
                continue
            spec = catalogue.lookup(q.instance_type)
            have = capacity[q.instance_type]
            asked = q.count if q.count is not None else -(-q.accelerators // max(spec.accelerators, 1))
            if (q.count is not None and q.count < 1) or (q.accelerators is not None and q.accelerators < 1):
                p.error(qpath, q.model_dump(exclude_none=True), "must ask for at least 1")
            elif q.accelerators is not None and not spec.accelerators:
                p.error(f"{qpath}.accelerators", q.accelerators, f"but {q.instance_type} has no accelerators; use count")
            elif asked > have:
                p.error(qpath, q.model_dump(exclude_none=True), f"is more than the cluster's {have} x {q.instance_type}")
            else:
                demand.setdefault(q.instance_type, []).append((team.name, asked))
    for itype, asks in demand.items():
        total = sum(n for _, n in asks)
        if total > capacity[itype]:
            teams = ", ".join(t for t, _ in asks)
            line = f"governance.teams: quotas for {itype} add up to {total}, above the cluster's {capacity[itype]} (teams: {teams})"
            if g.allow_oversubscription:
                p.warn(line + "; allowed by governance.allow_oversubscription")
            else:
                p.errors.append(line + "; set governance.allow_oversubscription to intend it")
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
                    f"but hyperpod.instance_groups[{i}] ({grp.instance_type}) has no EC2 topology labels; use 'preferred'",
                )
