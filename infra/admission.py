"""What will run: a job's demand as Kueue counts it, and whether its team can ever hold it.

One model, read by validation (so `validate`, `cdk synth` and `render-job` refuse the same
jobs), the team kit (the largest job a team can run) and the review (a change that makes a job
inadmissible). Plain data in and out; no CDK.

How task governance turns a team's ComputeQuota into Kueue's terms (each piece with its source):
- One ResourceFlavor per instance type, and per team a ClusterQueue
  `hyperpod-ns-<team>-clusterqueue` with, per flavor, a quota for GPUs (or other accelerators,
  or MIG slices), vCPUs and memory (Kueue's own message in aws-samples/awsome-distributed-training
  `1.architectures/7.sagemaker-hyperpod-eks/task-governance/README.md`: "borrowing limit for
  nvidia.com/gpu in flavor ml.g5.8xlarge exceeded").
- nominalQuota: what the team's quota entries take of each kind (`QuotaResource.takes`: a count
  takes whole instances; accelerators, vCPUs or memory alone bring their share of the others, as
  the API reference's ComputeQuotaResourceConfig says).
- borrowingLimit: only `LendAndBorrow` borrows (ResourceSharingConfig: `Lend` and `DontLend`
  lend or keep, never borrow). `BorrowLimit` is a percentage of the team's own quota (the same
  README: 2 instances with BorrowLimit 50 run a 3-instance job by borrowing 1), 50 when not given
  (the API reference: "Default is 50"). `AbsoluteBorrowLimits` caps what it borrows of an
  instance type "regardless of the percentage-based BorrowLimit": where it names the type it
  replaces the percentage for that type.
- lendingLimit: `DontLend` lends nothing (0); `Lend` and `LendAndBorrow` lend all.
- All teams' queues share one cohort, so a team borrows what the others' queues lend: Kueue
  lends the unused nominal quota of the cohort's ClusterQueues (Kueue's "Cluster Queue" concept
  page, Cohort). With idle resource sharing on (`governance.idle_resource_sharing`, the
  scheduler config's IdleResourceSharing), capacity no team's quota holds is borrowable too:
  "When enabled, unallocated resources are automatically calculated and made available for
  entities to borrow" (SageMaker API reference, SchedulerConfig). In Kueue's terms that is quota
  of the cohort's own, which its queues borrow within their borrowing limits like the rest
  (Kueue's "Cohort" concept page; `potentialAvailable` adds a cohort's own quota). A disabled
  quota's share is still allocated to its team, so it is not idle.
- A disabled quota (`active: false`, ActivationState Disabled) lends nothing, and its team's
  job is not judged (verdict "disabled"): no source says what its queue does meanwhile.
- Kueue never admits a workload that asks for more than its queue's potential maximum
  (`potentialAvailable` in Kueue's pkg/cache/scheduler/resource_node.go: nominal quota plus what
  the cohort lends, capped by the borrowing limit): `cluster_queue_maximum` is that function for
  a one-level cohort. The cluster's own capacity of the type caps it again (an admitted pod still
  needs a node).
- What Kueue counts is what the pod requests: `pod_requests`, which manifests/job.py writes into
  the job. The EFA interfaces are not counted: a ComputeQuota has no kind for them.
- A type whose figures no source states (`catalogue.figures` is None) counts nothing: its shares
  are empty and a job on it is not judged (validation refuses the sample job there).
- A job with no team joins no queue, and Kueue leaves it alone (Kueue's configuration reference:
  manageJobsWithoutQueueName "Defaults to false; therefore, those jobs are not managed"): only
  the instance group bounds it.

API
- `pod_requests(group, gpu_partition=None) -> dict[str, int]`: what one pod of a job on the
  group requests, by Kubernetes resource name (memory in GiB).
- `team_shares(settings, team, instance_type) -> dict[str, Share]`: per kind ("accelerators",
  "mig-<profile>", "vcpu", "memory_gib"), what the team holds: guaranteed, borrowable, the
  cluster's, the ceiling, and what limits the borrowing, in words.
- `sample_job(settings) -> Admission | None`: the verdict on the job `settings` render (the
  sample job, or `render-job` after `validation.override`): demand per kind, the shares, verdict
  "guaranteed" | "borrowing" | "never" | "unmanaged" | "disabled", the config field to change
  and its value, the arithmetic in words (`.line` is the whole line validation prints), and the
  most nodes the team can run guaranteed and at all. None when the job is off or its group or
  team unknown (other checks say so).
- `largest_jobs(settings, team) -> list[Largest]`: per instance group the team can use, the most
  nodes (or one-slice pods on a MIG group) it can run guaranteed and with borrowing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Literal, Optional

from infra import catalogue

if TYPE_CHECKING:
    from infra.config.base import Problems
    from infra.config.governance import Team
    from infra.config.hyperpod import InstanceGroup
    from infra.config.settings import Settings


# The share of a node the sample job's pod asks for; the rest stays for kubelet and the HyperPod agents.
NODE_CPU_SHARE = 0.9
NODE_MEMORY_SHARE = 0.85
# ResourceSharingConfig.BorrowLimit when a LendAndBorrow team gives none (API reference: "Default is 50").
DEFAULT_BORROW_LIMIT = 50
# Quantities are compared with this slack: quotas filled in by ratio are fractions.
EPSILON = 1e-6


def node_share(group: InstanceGroup, gpu_partition: Optional[str] = None) -> float:
    """The share of a node one pod of the job has: all of it, or one slice's of the node's slices."""
    return 1 / sum(group.mig_slices.values()) if gpu_partition else 1.0


def pod_requests(group: InstanceGroup, gpu_partition: Optional[str] = None) -> dict[str, int]:
    """What one pod of the sample job on `group` requests (its limits are the same): the whole
    node's devices, or one MIG slice and that slice's share of the node; "memory" is in GiB.
    The group's type must have known figures (catalogue.figures)."""
    spec, share = group.spec, node_share(group, gpu_partition)
    if gpu_partition:
        out = {catalogue.MIG_RESOURCE_PREFIX + gpu_partition: 1}
    else:
        out = dict(group.device_resources)
    out["cpu"] = max(1, int(spec.vcpus * NODE_CPU_SHARE * share))
    out["memory"] = max(1, int(spec.memory_gib * NODE_MEMORY_SHARE * share))
    return out


def kueue_kinds(requests: dict[str, int], spec: catalogue.InstanceType) -> dict[str, float]:
    """The requests in the kinds a ComputeQuota (and so the team's ClusterQueue) counts."""
    out: dict[str, float] = {}
    for name, n in requests.items():
        if name == spec.accelerator_resource:
            out["accelerators"] = n
        elif name.startswith(catalogue.MIG_RESOURCE_PREFIX):
            out["mig-" + name.removeprefix(catalogue.MIG_RESOURCE_PREFIX)] = n
        elif name == "cpu":
            out["vcpu"] = n
        elif name == "memory":
            out["memory_gib"] = n
    return out


def kind_order(kind: str) -> tuple:
    """Whole instances, then accelerators, MIG slices, vCPUs, memory: the kind a person thinks of first."""
    return ({"count": 0, "accelerators": 1, "vcpu": 3, "memory_gib": 4}.get(kind, 2), kind)


def _n(value: float) -> str:
    return f"{value:g}" if abs(value - round(value)) < EPSILON else f"{value:.1f}"


def amount(kind: str, value: float, spec: catalogue.InstanceType | None = None) -> str:
    """`value` of `kind` in words: "24 GPUs", "8 mig-1g.10gb slices", "192 vCPUs"."""
    number = _n(value)
    one = abs(value - 1) < EPSILON
    if kind == "accelerators":
        noun = "GPU" if spec is None or spec.accelerator_resource == "nvidia.com/gpu" else "accelerator"
        return f"{number} {noun}{'' if one else 's'}"
    if kind.startswith("mig-"):
        return f"{number} {kind} slice{'' if one else 's'}"
    return {"count": f"{number} instance{'' if one else 's'}", "vcpu": f"{number} vCPU{'' if one else 's'}",
            "memory_gib": f"{number} GiB of memory"}.get(kind, f"{number} {kind}")


# --------------------------------------------------------------------------- Kueue's arithmetic


@dataclass(frozen=True)
class QueueQuota:
    """One resource of one flavor in a ClusterQueue: nominalQuota, borrowingLimit and
    lendingLimit (None: unset, which Kueue reads as no limit)."""

    nominal: float
    borrowing_limit: Optional[float] = None
    lending_limit: Optional[float] = None

    @property
    def kept(self) -> float:
        """What never leaves the queue (Kueue's localQuota): nominal beyond the lending limit."""
        return max(0.0, self.nominal - self.lending_limit) if self.lending_limit is not None else 0.0

    @property
    def lent(self) -> float:
        """What the queue puts into its cohort."""
        return self.nominal - self.kept


def cluster_queue_maximum(queue: QueueQuota, cohort: Iterable[QueueQuota] = (), in_cohort: bool = True, cohort_own: float = 0.0) -> float:
    """The most a ClusterQueue can ever admit of one resource of one flavor, as Kueue's
    potentialAvailable computes it: what it keeps, plus all its cohort holds (its own lent
    share, every other queue's, and the cohort's own quota), capped by nominal +
    borrowingLimit. Without a cohort, the nominal quota."""
    if not in_cohort:
        return queue.nominal
    most = queue.kept + queue.lent + sum(q.lent for q in cohort) + cohort_own
    if queue.borrowing_limit is not None:
        most = min(most, queue.nominal + queue.borrowing_limit)
    return most


# --------------------------------------------------------------------------- a team's ClusterQueue


def quota_of(team: Team, instance_type: str, capacity: dict[str, dict[str, float]]) -> dict[str, float]:
    """What the team's quota entries for `instance_type` take of each kind (QuotaResource.takes,
    summed); empty for a type no group provides."""
    have = capacity.get(instance_type)
    spec = catalogue.figures(instance_type)
    out: dict[str, float] = {}
    if have is None or spec is None:  # a type no group provides, or one whose figures no source states
        return out
    for q in team.quotas:
        if q.instance_type == instance_type and q.given():
            for kind, n in q.takes(have, spec.accelerators).items():
                out[kind] = out.get(kind, 0.0) + n
    return out


@dataclass(frozen=True)
class Oversubscribed:
    """An instance type whose teams' quotas together take more of a kind than its groups hold:
    a guarantee that no node backs (Kueue admits by quota; the pods then find no node)."""

    instance_type: str
    kind: str
    total: float
    have: float
    asks: tuple[tuple[str, float], ...]  # (team, what its quota takes), in the teams' order


def oversubscribed(teams: Iterable[Team], capacity: dict[str, dict[str, float]]) -> list[Oversubscribed]:
    """Per instance type, the first kind (kind_order) the teams' quotas together take more of
    than the groups hold: what validate refuses, or warns of with allow_oversubscription, and
    the review calls out where a change makes it."""
    demand: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for team in teams:
        for itype in dict.fromkeys(q.instance_type for q in team.quotas):
            for kind, n in quota_of(team, itype, capacity).items():
                demand.setdefault((itype, kind), []).append((team.name, n))
    out = []
    for itype in sorted({t for t, _ in demand}):
        for kind in sorted((k for t, k in demand if t == itype), key=kind_order):
            asks, have = demand[(itype, kind)], capacity[itype].get(kind, 0) or 0
            total = sum(n for _, n in asks)
            if total > have + EPSILON:
                out.append(Oversubscribed(itype, kind, total, have, tuple(asks)))
                break
    return out


@dataclass(frozen=True)
class Borrowing:
    """What a team's ClusterQueue may borrow of each kind of one type, and why that much."""

    limits: dict[str, float]
    why: str


def borrowing(team: Team, instance_type: str, capacity: dict[str, dict[str, float]], nominal: dict[str, float]) -> Borrowing:
    """The borrowingLimit per kind task governance gives the team's queue for `instance_type`."""
    if not team.active:
        return Borrowing({}, "its quota is disabled: active false")
    if team.sharing != "LendAndBorrow":
        return Borrowing({}, f"sharing {team.sharing!r} never borrows")
    absolute = next((q for q in team.absolute_borrow_limits if q.instance_type == instance_type), None)
    spec = catalogue.figures(instance_type)
    if absolute is not None and instance_type in capacity and spec is not None:
        return Borrowing(absolute.takes(capacity[instance_type], spec.accelerators), "absolute_borrow_limits")
    percent = team.borrow_limit if team.borrow_limit is not None else DEFAULT_BORROW_LIMIT
    why = f"borrow_limit {percent}% of its quota" if team.borrow_limit is not None else f"borrow_limit unset: SageMaker's default {percent}% of its quota"
    return Borrowing({kind: n * percent / 100 for kind, n in nominal.items()}, why)


def cluster_queue(settings: Settings, team: Team, instance_type: str) -> dict[str, QueueQuota]:
    """The team's ClusterQueue for the instance type's flavor, per kind, as task governance
    makes it of the ComputeQuota."""
    capacity = settings.resource_capacity()
    nominal = quota_of(team, instance_type, capacity) if team.active else {}
    borrow = borrowing(team, instance_type, capacity, nominal)
    lending = 0.0 if team.sharing == "DontLend" else None
    kinds = set(capacity.get(instance_type, {})) - {"count"}
    return {k: QueueQuota(nominal.get(k, 0.0), borrow.limits.get(k, 0.0), lending) for k in kinds}


@dataclass(frozen=True)
class Share:
    """What a team can hold of one kind of one instance type."""

    kind: str
    guaranteed: float
    # The most it can borrow, after its borrowing limit and what the other teams lend.
    borrowable: float
    # What the cluster's groups of the type have.
    cluster: float
    # What bounds the borrowing, in words.
    limit: str
    # Of what it may borrow, what no team's quota holds (idle resource sharing).
    idle: float = 0.0

    @property
    def ceiling(self) -> float:
        """The most the team can ever hold: guaranteed plus borrowable, within the cluster."""
        return min(self.guaranteed + self.borrowable, self.cluster)


def team_shares(settings: Settings, team: Team, instance_type: str) -> dict[str, Share]:
    """Per kind of `instance_type`, what `team` holds guaranteed, what it can borrow and why;
    empty for a type whose figures no source states (nothing here can be counted of it)."""
    if catalogue.figures(instance_type) is None:
        return {}
    capacity = settings.resource_capacity()
    others = [t for t in settings.governance.teams if t.name != team.name]
    queues = {t.name: cluster_queue(settings, t, instance_type) for t in [team, *others]}
    why = borrowing(team, instance_type, capacity, quota_of(team, instance_type, capacity)).why
    idle = unallocated(settings, instance_type)
    out = {}
    for kind, own in queues[team.name].items():
        cohort = [queues[t.name][kind] for t in others]
        most = cluster_queue_maximum(own, cohort, cohort_own=idle.get(kind, 0.0))
        borrowable = max(0.0, most - own.nominal)
        limit = why
        if own.borrowing_limit and borrowable < own.borrowing_limit - EPSILON:
            lenders = [t.name for t in others if queues[t.name][kind].lent > EPSILON]
            lent = f"all {', '.join(lenders)} lend{'s' if len(lenders) == 1 else ''}" if lenders else ""
            free = f"the {_n(idle[kind])} no team's quota holds" if idle.get(kind, 0.0) > EPSILON else ""
            limit = " and ".join(x for x in (lent, free) if x) or "no other team lends any"
        from_others = sum(q.lent for q in cohort)
        idle_used = min(idle.get(kind, 0.0), max(0.0, borrowable - from_others))
        out[kind] = Share(kind, own.nominal, borrowable, capacity.get(instance_type, {}).get(kind, 0.0), limit, idle_used)
    return out


def unallocated(settings: Settings, instance_type: str) -> dict[str, float]:
    """Per kind, what the cluster has of `instance_type` that no team's quota holds: borrowable
    by every team that borrows where idle resource sharing is on, nothing where it is off."""
    if not settings.governance.idle_resource_sharing:
        return {}
    capacity = settings.resource_capacity()
    held: dict[str, float] = {}
    for t in settings.governance.teams:  # a disabled quota's share stays its team's
        for kind, n in quota_of(t, instance_type, capacity).items():
            held[kind] = held.get(kind, 0.0) + n
    return {k: max(0.0, (n or 0.0) - held.get(k, 0.0)) for k, n in capacity.get(instance_type, {}).items() if k != "count"}


# --------------------------------------------------------------------------- verdicts


Verdict = Literal["guaranteed", "borrowing", "never", "unmanaged", "disabled"]


@dataclass(frozen=True)
class Admission:
    """The verdict on one job: whether its team can ever hold it, and the arithmetic."""

    job: str
    team: Optional[str]
    group: str
    instance_type: str
    nodes: int
    # Per kind, what one node's pod asks for, and what the whole job asks for.
    per_node: dict[str, float]
    demand: dict[str, float]
    # Per kind, what the team holds (empty for a job with no team, or one that cannot start).
    shares: dict[str, Share]
    verdict: Verdict
    # The config field a person changes (for "never") and its value: `line` names both.
    field: str
    value: object
    # The arithmetic behind the verdict, in words, following the field and its value.
    reason: str
    # The most nodes the team can run guaranteed and at all (None where no team bounds it).
    nodes_guaranteed: Optional[int] = None
    nodes_at_most: Optional[int] = None

    @property
    def line(self) -> str:
        """The verdict as validation prints it: `<field>: <value> <reason>`."""
        return f"{self.field}: {self.value!r} {self.reason}"

    def report(self, p: "Problems", warn: tuple[str, ...] = ("borrowing", "disabled")) -> None:
        """Into validation's problems: a refusal where the team can never hold it, a warning for the
        verdicts in `warn` (what a job, or an endpoint, is admitted only by chance)."""
        if self.verdict == "never":
            p.error(self.field, self.value, self.reason)
        elif self.verdict in warn:
            p.warn(self.line)


def _fits(per_node: dict[str, float], bound: dict[str, float]) -> int:
    """How many nodes of `per_node` fit in `bound` (0 where a kind asked for has none)."""
    counts = [math.floor((bound.get(k, 0.0) + EPSILON) / n) for k, n in per_node.items() if n > 0]
    return min(counts) if counts else 0


def _measure(shares: dict[str, Share], per_unit: dict[str, float], demand: dict[str, float]) -> tuple[Optional[str], Optional[str], int, int]:
    """Kueue's two questions of a workload against its team's shares: the first kind it asks more
    of than the team can ever hold (its queue's ceiling), the first it asks more of than the
    team's guaranteed quota, and how many units (nodes, replicas) fit each."""
    guaranteed = {k: s.guaranteed for k, s in shares.items()}
    ceiling = {k: s.ceiling for k, s in shares.items()}
    ordered = sorted(demand, key=kind_order)
    short = next((k for k in ordered if demand[k] > ceiling.get(k, 0.0) + EPSILON), None)
    over = next((k for k in ordered if demand[k] > guaranteed.get(k, 0.0) + EPSILON), None)
    return short, over, _fits(per_unit, guaranteed), _fits(per_unit, ceiling)


def _nodes(n: int) -> str:
    return f"node{'s' * (n != 1)}"


def sample_job(settings: Settings) -> Admission | None:
    """The verdict on the job these settings render (the sample job; render-job's overrides
    come in through validation.override). None where the job is off or its group, type or team
    unknown: other checks name those."""
    job = settings.sample_job
    group = settings.instance_group(job.instance_group)
    if not job.enabled or group is None or catalogue.figures(group.instance_type) is None:
        return None
    spec, itype = group.spec, group.instance_type
    base = dict(job=job.name, team=job.team, group=group.name, instance_type=itype, nodes=job.nodes)
    if group.mig_slices and not job.gpu_partition:
        slices = ", ".join(f"{n} x {p}" for p, n in group.mig_slices.items())
        reason = (
            f"must name a slice on instance group {group.name!r}, whose GPUs are cut into MIG slices ({group.mig_profile}): "
            f"unset, the job asks for every slice of each node ({slices}) with {spec.accelerators} ranks per node, and a CUDA "
            "process sees only one MIG device (NVIDIA MIG user guide), so it cannot start"
        )
        return Admission(**base, per_node={}, demand={}, shares={}, verdict="never", field="sample_job.gpu_partition",
                         value=None, reason=reason)
    per_node = kueue_kinds(pod_requests(group, job.gpu_partition), spec)
    demand = {k: n * job.nodes for k, n in per_node.items()}
    # The field that sizes the job, its value, and the rest of the sentence that follows them.
    if job.gpu_partition:
        field, value, what, plural = "sample_job.gpu_partition", job.gpu_partition, f"slice of {itype}", False
        whole = f"one {job.gpu_partition} slice of {itype}"
    else:
        field, value, what, plural = "sample_job.nodes", job.nodes, f"{_nodes(job.nodes)} of {itype}", job.nodes != 1
        whole = f"{job.nodes} {what}"
    if job.team is None:
        reason = f"joins no queue, so Kueue does not manage the job (manageJobsWithoutQueueName defaults to false): only instance group {group.name!r} bounds it"
        return Admission(**base, per_node=per_node, demand=demand, shares={}, verdict="unmanaged", field="sample_job.team",
                         value=None, reason=reason)
    team = next((t for t in settings.governance.teams if t.name == job.team), None)
    if team is None:
        return None
    shares = team_shares(settings, team, itype)
    if not team.active:
        # ActivationState Disabled: no source says what the queue does meanwhile; the job is
        # judged once the quota is on, and waits until then.
        reason = "has its compute quota disabled (active false): the job waits until it is enabled"
        return Admission(**base, per_node=per_node, demand=demand, shares=shares, verdict="disabled", field="sample_job.team",
                         value=team.name, reason=reason)
    short, over, fit_g, fit_max = _measure(shares, per_node, demand)
    if not job.gpu_partition:
        fit_g, fit_max = min(fit_g, group.ceiling), min(fit_max, group.ceiling)
    verdict = dict(per_node=per_node, demand=demand, shares=shares, nodes_guaranteed=fit_g, nodes_at_most=fit_max)
    if short is not None:
        s = shares.get(short) or Share(short, 0.0, 0.0, 0.0, "")
        sums = f"{_n(s.guaranteed)} guaranteed + at most {_n(s.borrowable)} borrowed ({s.limit}) = {amount(short, s.guaranteed + s.borrowable, spec)}"
        if s.guaranteed + s.borrowable > s.cluster + EPSILON:
            sums += f", of which the cluster has {_n(s.cluster)}"
        asked = amount(short, demand[short], spec)
        if fit_max >= 1 and not job.gpu_partition:
            reason = f"{what} ({asked}) can never be admitted for team {team.name}: {sums}; at most {fit_max} {_nodes(fit_max)}"
            return Admission(**base, **verdict, verdict="never", field=field, value=value, reason=reason)
        hint = _why_none(team, itype, short)
        reason = (f"can never hold {whole} ({asked}): {sums}" + (f"; {hint}" if hint else "")
                  + "; give the job a team that holds it, or this team a quota for it")
        return Admission(**base, **verdict, verdict="never", field="sample_job.team", value=team.name, reason=reason)
    if over is not None:
        s = shares[over]
        borrowed = demand[over] - s.guaranteed
        # What the other teams lend is used first in this sentence; the rest is idle capacity.
        idle = min(s.idle, max(0.0, borrowed - (s.borrowable - s.idle)))
        from_idle = (
            f", {_n(idle)} of them from capacity no team's quota holds (governance.idle_resource_sharing), which any team "
            "that borrows may hold first"
            if idle > EPSILON else ""
        )
        reason = (
            f"{what} ({amount(over, demand[over], spec)}) {'are' if plural else 'is'} admitted for team {team.name} only by borrowing: "
            f"{_n(s.guaranteed)} guaranteed + {_n(borrowed)} of at most {_n(s.borrowable)} borrowed ({s.limit}){from_idle}; "
            "the job waits while the lenders use their quota, and is preempted when they reclaim it"
        )
        return Admission(**base, **verdict, verdict="borrowing", field=field, value=value, reason=reason)
    reason = f"{what} fit{'' if plural else 's'} team {team.name}'s guaranteed quota"
    return Admission(**base, **verdict, verdict="guaranteed", field=field, value=value, reason=reason)


def _why_none(team: Team, instance_type: str, kind: str) -> str:
    """Why a team holds none of `kind`, where its quota has the type but not the kind."""
    entries = [q for q in team.quotas if q.instance_type == instance_type]
    if not entries:
        return f"its quotas name no {instance_type}"
    given = sorted({k for q in entries for k in q.given()}, key=kind_order)
    if "count" in given or kind in given:  # the entry names the kind: its amount says why
        return ""
    spec = catalogue.lookup(instance_type)
    nouns = [amount(k, 2, spec).split(" ", 1)[1] for k in given]
    return f"its quota for {instance_type} gives {', '.join(nouns)} only, which bring no {amount(kind, 2, spec).split(' ', 1)[1]}"


@dataclass(frozen=True)
class Largest:
    """The largest job of the sample's shape a team can run on one instance group."""

    group: str
    instance_type: str
    # "node" (whole nodes), or "<profile> slice" (one-slice pods on a MIG group).
    unit: str
    guaranteed: int
    with_borrowing: int


def largest_jobs(settings: Settings, team: Team) -> list[Largest]:
    """Per instance group of a type the team has a quota or a borrow limit for: the most whole
    nodes (on a MIG group, one-slice pods of each profile) it can run guaranteed and at most."""
    types = {q.instance_type for q in (*team.quotas, *team.absolute_borrow_limits)}
    out = []
    for group in settings.hyperpod.instance_groups:
        spec = catalogue.figures(group.instance_type)
        if group.instance_type not in types or spec is None:
            continue
        shares = team_shares(settings, team, group.instance_type)
        guaranteed = {k: s.guaranteed for k, s in shares.items()}
        ceiling = {k: s.ceiling for k, s in shares.items()}
        units = [(f"{p} slice", p, group.ceiling * n) for p, n in group.mig_slices.items()] or [("node", None, group.ceiling)]
        for unit, partition, most in units:
            per = kueue_kinds(pod_requests(group, partition), spec)
            out.append(Largest(group.name, group.instance_type, unit,
                               min(_fits(per, guaranteed), most), min(_fits(per, ceiling), most)))
    return out


def replica_requests(group: InstanceGroup, gpus: int) -> dict[str, int]:
    """What one endpoint replica asking for `gpus` accelerators of a node of `group` requests:
    the accelerators and their share of the node's vCPUs and memory, as the job's pod has of a
    whole node (NODE_CPU_SHARE, NODE_MEMORY_SHARE)."""
    spec = group.spec
    share = gpus / spec.accelerators if spec.accelerators else 1.0
    return {spec.accelerator_resource: gpus, "cpu": max(1, int(spec.vcpus * NODE_CPU_SHARE * share)),
            "memory": max(1, int(spec.memory_gib * NODE_MEMORY_SHARE * share))}


def endpoint(settings: Settings) -> Admission | None:
    """The verdict on the inference endpoint (inference.endpoint): whether its team's queue can
    ever hold all its replicas at once, by the job's rules (team_shares, Kueue's ceiling). None
    where serving is off, or its group, type or team is unknown (other checks say so)."""
    inf = settings.inference
    ep = inf.endpoint
    team_name = ep.team or settings.sample_job.team
    group = settings.instance_group(ep.instance_group or settings.sample_job.instance_group)
    if not inf.enabled or group is None or catalogue.figures(group.instance_type) is None or not group.spec.accelerators:
        return None
    itype, spec = group.instance_type, group.spec
    per_replica = kueue_kinds(replica_requests(group, ep.gpus_per_replica), spec)
    demand = {k: n * ep.replicas for k, n in per_replica.items()}
    what = f"replica{'s' * (ep.replicas != 1)} of {ep.gpus_per_replica} GPU{'s' * (ep.gpus_per_replica != 1)} on {itype}"
    base = dict(job=ep.name, team=team_name, group=group.name, instance_type=itype, nodes=ep.replicas, per_node=per_replica, demand=demand)
    if team_name is None:
        reason = f"joins no queue, so Kueue does not manage the endpoint: only instance group {group.name!r} bounds it"
        return Admission(**base, shares={}, verdict="unmanaged", field="inference.endpoint.team", value=None, reason=reason)
    team = next((t for t in settings.governance.teams if t.name == team_name), None)
    if team is None:
        return None
    shares = team_shares(settings, team, itype)
    if not team.active:
        return Admission(**base, shares=shares, verdict="disabled", field="inference.endpoint.team", value=team.name,
                         reason="has its compute quota disabled (active false): the endpoint's replicas wait until it is enabled")
    short, over, fit_g, fit_max = _measure(shares, per_replica, demand)
    counts = dict(shares=shares, nodes_guaranteed=fit_g, nodes_at_most=fit_max)
    if short is not None:
        s = shares.get(short) or Share(short, 0.0, 0.0, 0.0, "")
        reason = (f"{what} ({amount(short, demand[short], spec)}) can never all be admitted for team {team.name}: "
                  f"{_n(s.guaranteed)} guaranteed + at most {_n(s.borrowable)} borrowed ({s.limit}); at most {fit_max} "
                  f"replica{'s' * (fit_max != 1)}; the rest stay Pending with no error")
        return Admission(**base, **counts, verdict="never", field="inference.endpoint.replicas", value=ep.replicas, reason=reason)
    if over is not None:
        s = shares[over]
        reason = (f"{what} ({amount(over, demand[over], spec)}) are admitted for team {team.name} only by borrowing: "
                  f"{_n(s.guaranteed)} guaranteed, {fit_g} replica{'s' * (fit_g != 1)} without borrowing; borrowed replicas are "
                  "preempted when the lenders reclaim their quota (the HyperPod page: size the serving team's quota for traffic spikes)")
        return Admission(**base, **counts, verdict="borrowing", field="inference.endpoint.replicas", value=ep.replicas, reason=reason)
    return Admission(**base, **counts, verdict="guaranteed", field="inference.endpoint.replicas", value=ep.replicas,
                     reason=f"{what} fit team {team.name}'s guaranteed quota")
