"""Task governance: priority classes, teams and their quotas, topology-aware scheduling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field

from infra import admission, catalogue, naming
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
    name: str = Field(description="Class name; Kubernetes sees `<name>-priority`.")
    weight: int = Field(description="Higher preempts lower.")


class AcceleratorPartition(Model):
    type: str = Field(description="A MIG slice, `mig-<profile>` (e.g. `mig-1g.10gb`), that some group is cut into.")
    count: int = Field(description="Slices.")


# The resource kinds a quota entry can name, beside whole instances ("count").
KINDS = ("accelerators", "vcpu", "memory_gib")


class QuotaResource(Model):
    """One instance type's share (ComputeQuotaResourceConfig): whole instances (count), or any
    of accelerators, vCPUs, memory and MIG slices of the type."""

    instance_type: str = Field(description="An instance type some group provides.")
    count: Optional[int] = Field(
        default=None, description="Whole instances, alone; or give any of `accelerators`, `vcpu`, `memory_gib` and `accelerator_partition` instead."
    )
    accelerators: Optional[int] = Field(
        default=None, description="Accelerators (GPUs, Trainium chips); alone, SageMaker adds their share of vCPUs and memory."
    )
    vcpu: Optional[float] = Field(default=None, description="vCPUs; alone, SageMaker adds their share of memory and no accelerators.")
    memory_gib: Optional[float] = Field(default=None, description="Memory in GiB; alone, SageMaker adds its share of vCPUs.")
    accelerator_partition: Optional[AcceleratorPartition] = Field(default=None, description="MIG slices of a group with `mig_profile`.")

    def given(self) -> dict[str, float]:
        """The kinds set here and their amounts (a partition as its "mig-<profile>" kind)."""
        out = {k: getattr(self, k) for k in ("count", *KINDS) if getattr(self, k) is not None}
        if self.accelerator_partition is not None:
            out[self.accelerator_partition.type] = self.accelerator_partition.count
        return out

    def takes(self, capacity: dict[str, float], gpus_per_instance: int) -> dict[str, float]:
        """What the entry takes of each kind of its type's `capacity`. SageMaker fills in what
        is not given in proportion (ComputeQuotaResourceConfig's documentation): a count takes
        whole instances of every kind; accelerators alone bring their share of vCPUs and
        memory; vCPUs alone their share of memory, memory alone its share of vCPUs, neither
        any accelerators. A partition brings the share of the type's GPU compute its slices
        are (a 4g slice is 4 of a GPU's 7 compute units)."""
        given = self.given()
        if "count" in given:
            share = given["count"] / capacity["count"] if capacity.get("count") else 0
            return {kind: total * share for kind, total in capacity.items()}
        out = dict(given)
        if "accelerators" in given:
            share = given["accelerators"] / capacity["accelerators"] if capacity.get("accelerators") else 0
        elif self.accelerator_partition is not None:
            units = int(self.accelerator_partition.type.removeprefix("mig-").split("g", 1)[0])
            gpus = capacity.get("count", 0) * gpus_per_instance
            share = self.accelerator_partition.count * units / (7 * gpus) if gpus else 0
        elif "vcpu" in given:
            share = given["vcpu"] / capacity["vcpu"] if capacity.get("vcpu") else 0
        else:
            share = given["memory_gib"] / capacity["memory_gib"] if capacity.get("memory_gib") else 0
        for kind in ("vcpu", "memory_gib"):
            out.setdefault(kind, capacity.get(kind, 0) * share)
        return out


class Team(Model):
    name: str = Field(description="Team; it gets namespace `hyperpod-ns-<team>` and its queues.")
    quotas: tuple[QuotaResource, ...] = Field(
        min_length=1,
        description="Its guaranteed share per instance type (`ComputeQuotaResourceConfig`): whole instances, or any of "
        "accelerators, vCPUs, memory and MIG slices of the type.",
    )
    sharing: Literal["Lend", "DontLend", "LendAndBorrow"] = Field(
        default="LendAndBorrow",
        description="Whether it lends its idle share and borrows.",
    )
    borrow_limit: Optional[int] = Field(
        default=None,
        description="Percent of its quota the team may borrow from idle capacity (`LendAndBorrow` only); unset: SageMaker's default 50.",
    )
    absolute_borrow_limits: tuple[QuotaResource, ...] = Field(
        default=(), description="Per instance type, the most the team may borrow (`LendAndBorrow`), beside the percentage."
    )
    preempt: Literal["Never", "LowerPriority"] = Field(
        default="LowerPriority", description="Whether a higher-priority job of the team preempts its lower-priority ones."
    )
    principals: tuple[str, ...] = Field(
        default=(),
        description="IAM role ARNs of the team's people: an EKS access entry each, into the team's namespace only (submit "
        "and watch jobs there), none elsewhere (docs/governance.md, A team's kit).",
    )
    fair_share_weight: int = Field(default=50, description="Its weight in fair-share scheduling.")
    active: bool = Field(default=True, description="The quota is enabled.")
    pod_security: Literal["baseline", "restricted"] = Field(
        default="restricted",
        description="The Pod Security Standard its namespace enforces (warn and audit are always `restricted`): `restricted` "
        "requires non-root, no privilege escalation, an explicit seccomp profile and every capability dropped (the sample "
        "job and the acceptance probes meet it); `baseline`, the opt-out for images that must run as root, refuses only "
        "privileged pods, host namespaces, hostPath and added capabilities, and its warnings and audit events name what "
        "restricted would refuse.",
    )


class GovernanceSettings(Model):
    priority_classes: tuple[PriorityClass, ...] = Field(
        default=(),
        description="Priority classes: a job labelled `kueue.x-k8s.io/priority-class: <name>-priority` may preempt lower ones.",
    )
    fair_share: bool = Field(default=True, description="Fair-share scheduling between teams.")
    idle_resource_sharing: bool = Field(
        default=True,
        description="Capacity no team's quota holds is borrowable by the teams that borrow, within their borrow limits "
        "(SchedulerConfig.IdleResourceSharing); what a team lends of its own quota is its sharing.",
    )
    allow_oversubscription: bool = Field(
        default=False, description="Team quotas may add up to more than the cluster has (a warning names the teams)."
    )
    teams: tuple[Team, ...] = Field(
        default=(),
        description="One compute quota per team, with its namespace `hyperpod-ns-<team>` and queues.",
    )


class TopologySettings(Model):
    mode: Literal["none", "preferred", "required"] = Field(
        default="none", description="`kueue.x-k8s.io/podset-required-topology` or `-preferred-topology` on jobs, or none."
    )
    level: str = Field(
        default="topology.k8s.aws/network-node-layer-3",
        description="`topology.k8s.aws/network-node-layer-1`, `-2` or `-3`, or `topology.k8s.aws/ultraserver-id`.",
    )


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
    for i, team in enumerate(g.teams):
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
        elif amount > have.get(kind, 0) + 1e-9:
            p.error(f"{path}.{_field(kind)}", amount, f"is more than the cluster's {admission.amount(kind, have.get(kind, 0), catalogue.lookup(q.instance_type))} of {q.instance_type}")
    return len(p.errors) == problems


def _field(kind: str) -> str:
    return "accelerator_partition.count" if kind.startswith("mig-") else kind



# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, which refuses a team's job without
# its queue label (manifests/tenancy.py), is GA and on from Kubernetes 1.30.
QUEUE_POLICY_SINCE = (1, 30)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


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
