"""Teams and people as two assemblies differ: what a platform team changes most.

Read from the templates, so a deployed template is a baseline as good as a synthesized one:
- a team is a compute quota (`AWS::SageMaker::ComputeQuota`, its ComputeQuotaTarget.TeamName);
  with it go the namespace and queues task governance makes of it, the team's Role and
  ClusterRole (a manifest of the team's names) and its people's access entries;
- a principal's access is its EKS access entries (`AWS::EKS::AccessEntry`): the Kubernetes
  groups it is mapped to (a team's group reaches that team's namespace through its Role) and
  the EKS access policies with their scope (AmazonEKSClusterAdminPolicy on the cluster is
  cluster admin). Only principals named by ARN count: the stack's own roles (a handler's, the
  kubectl provider's) are the deployment's, not people's.

Each callout names the config field it comes from, where the review shows it (cli/review/sarif.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cli.review.assembly import StackSummary, manifest_objects, of_type
from infra import admission, catalogue, naming

if TYPE_CHECKING:
    from infra.config import Settings

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# SageMaker's defaults where a compute quota leaves a field out (botocore's SageMaker model:
# ResourceSharingConfig.Strategy "Default is LendandBorrow", BorrowLimit "Default is 50", which the
# admission model holds; ComputeQuotaTarget.FairShareWeight "Weight 0 is the default"; PreemptTeamTasks LowerPriority).
DEFAULT_STRATEGY = "LendAndBorrow"
DEFAULT_BORROW_LIMIT = admission.DEFAULT_BORROW_LIMIT
DEFAULT_FAIR_SHARE_WEIGHT = 0
DEFAULT_PREEMPT = "LowerPriority"

# ComputeQuotaResourceConfig's amounts -> the kinds the config and the admission model name.
_KINDS = {"Count": "count", "Accelerators": "accelerators", "VCpu": "vcpu", "MemoryInGiB": "memory_gib"}


@dataclass
class Team:
    name: str
    quota: dict[tuple[str, str], float]  # (instance type, kind) -> amount guaranteed
    strategy: str
    borrow_limit: int
    absolute: dict[tuple[str, str], float]  # (instance type, kind) -> the most it may borrow
    weight: int
    preempt: str
    active: bool
    objects: list[str] = field(default_factory=list)  # the kinds of what the app applies for it (its Role, its policies)
    principals: list[str] = field(default_factory=list)


def _amounts(entries) -> dict[tuple[str, str], float]:
    out = {}
    for entry in entries if isinstance(entries, list) else []:
        itype = entry.get("InstanceType", "?")
        for prop, kind in _KINDS.items():
            if isinstance(entry.get(prop), (int, float)):
                out[(itype, kind)] = entry[prop]
        partition = entry.get("AcceleratorPartition") or {}
        if isinstance(partition.get("Count"), (int, float)):
            out[(itype, str(partition.get("Type", "mig-?")))] = partition["Count"]
    return out


def teams(stacks: list[StackSummary]) -> dict[str, Team]:
    """team name -> what its compute quota says, and what goes with it."""
    out = {}
    for _, _, res in of_type(stacks, "AWS::SageMaker::ComputeQuota"):
        props = res.get("Properties", {})
        target, config = props.get("ComputeQuotaTarget", {}), props.get("ComputeQuotaConfig", {})
        sharing = config.get("ResourceSharingConfig", {})
        name = target.get("TeamName")
        if not isinstance(name, str):
            continue
        out[name] = Team(
            name=name,
            quota=_amounts(config.get("ComputeQuotaResources")),
            strategy=sharing.get("Strategy", DEFAULT_STRATEGY),
            borrow_limit=sharing.get("BorrowLimit", DEFAULT_BORROW_LIMIT),
            absolute=_amounts(sharing.get("AbsoluteBorrowLimits")),
            weight=target.get("FairShareWeight", DEFAULT_FAIR_SHARE_WEIGHT),
            preempt=config.get("PreemptTeamTasks", DEFAULT_PREEMPT),
            active=props.get("ActivationState", "Enabled") == "Enabled",
        )
    for name, team in out.items():
        team.objects = _team_objects(stacks, name)
    for principal, grants in access(stacks).items():
        for name, team in out.items():
            if _team_grant(name) in grants:
                team.principals.append(principal)
    return out


# A job is not the team's: it has a callout of its own.
_NOT_THE_TEAMS = ("HyperPodPyTorchJob",)


def _team_objects(stacks: list[StackSummary], team: str) -> list[str]:
    """What the app applies for a team, by kind: objects in its namespace or named after it (its
    ClusterRole and binding), and the labels a patch puts on its namespace (Pod Security's)."""
    names = naming.team_names(team)
    kinds: list[str] = []
    for _, _, obj in manifest_objects(stacks):
        meta = obj.get("metadata", {})
        ours = meta.get("namespace") == names.namespace or str(meta.get("name", "")).startswith(f"{names.namespace}-")
        if ours and obj.get("kind") not in _NOT_THE_TEAMS:
            kinds.append(str(obj.get("kind")))
    for _, _, res in of_type(stacks, "Custom::AWSCDK-EKS-KubernetesPatch"):
        props = res.get("Properties", {})
        if props.get("ResourceName") == f"namespace/{names.namespace}" and "pod-security.kubernetes.io/" in str(props.get("ApplyPatchJson")):
            kinds.append("Pod Security labels")
    return list(dict.fromkeys(kinds))


def _team_grant(team: str) -> str:
    return f"namespace {naming.team_names(team).namespace}"


def _policy_name(arn) -> str:
    from cli.review.iam_audit import readable

    return readable(arn).rsplit("/", 1)[-1]


def access(stacks: list[StackSummary]) -> dict[str, set[str]]:
    """principal ARN -> what its access entries give it, in words: `cluster admin`,
    `namespace hyperpod-ns-<team>` (a team's group), `Kubernetes group <g>`, `<Policy> on ...`."""
    groups = {naming.team_names(t).group: t for t in teams_named(stacks)}
    out: dict[str, set[str]] = {}
    for _, _, res in of_type(stacks, "AWS::EKS::AccessEntry"):
        props = res.get("Properties", {})
        principal = props.get("PrincipalArn")
        if not isinstance(principal, str):
            continue  # a role of the stack itself
        grants = out.setdefault(principal, set())
        for group in props.get("KubernetesGroups", []) or []:
            grants.add(_team_grant(groups[group]) if group in groups else f"Kubernetes group {group}")
        for policy in props.get("AccessPolicies", []) or []:
            name, scope = _policy_name(policy.get("PolicyArn")), policy.get("AccessScope", {})
            if scope.get("Type") == "cluster":
                grants.add("cluster admin" if name == CLUSTER_ADMIN_POLICY else f"{name} on the cluster")
            else:
                grants.add(f"{name} in namespace(s) {', '.join(scope.get('Namespaces', []))}")
    return out


def teams_named(stacks: list[StackSummary]) -> list[str]:
    return [
        res["Properties"]["ComputeQuotaTarget"]["TeamName"]
        for _, _, res in of_type(stacks, "AWS::SageMaker::ComputeQuota")
        if isinstance(res.get("Properties", {}).get("ComputeQuotaTarget", {}).get("TeamName"), str)
    ]


def _amount(itype: str, kind: str, value: float | None) -> str:
    return admission.amount(kind, value, catalogue.lookup(itype)) if value is not None else "none"


def _ordered(amounts) -> list[tuple[str, str]]:
    return sorted(amounts, key=lambda key: (key[0], admission.kind_order(key[1])))


def _amounts_text(amounts: dict[tuple[str, str], float]) -> str:
    return ", ".join(f"{_amount(itype, kind, amounts[(itype, kind)])} of {itype}" for itype, kind in _ordered(amounts)) or "nothing"


def _sharing_text(team: Team) -> str:
    if team.strategy != "LendAndBorrow":
        return f"{team.strategy} (borrows nothing)"
    limits = f"; at most {_amounts_text(team.absolute)}" if team.absolute else ""
    return f"LendAndBorrow up to {team.borrow_limit}% of its quota{limits}"


def _moved(label: str, before: dict, after: dict) -> list[str]:
    return [
        f"{label} {itype}: {_amount(itype, kind, before.get(key))} -> {_amount(itype, kind, after.get(key))}"
        for key in _ordered(before.keys() | after.keys())
        for itype, kind in [key]
        if before.get(key) != after.get(key)
    ]


def compare(before: list[StackSummary], after: list[StackSummary]) -> list[tuple[str, list[str]]]:
    """(callout, the config fields it may come from) for each team added, removed or whose
    quota or borrowing moved, and each principal gaining or losing access."""
    old, new = teams(before), teams(after)
    out: list[tuple[str, list[str]]] = []
    for name in sorted(old.keys() | new.keys()):
        team = new.get(name) or old[name]
        names = naming.team_names(name)
        where = [f"governance.teams[{name}]"]
        goes = [f"compute quota ({_amounts_text(team.quota)}; sharing {_sharing_text(team)})",
                f"its namespace {names.namespace} and queue {names.local_queue} (task governance makes them of the quota)"]
        if team.objects:
            goes.append(f"its {', '.join(team.objects)}")
        if team.principals:
            goes.append(f"access entries for {len(team.principals)} principal(s)")
        if name not in old:
            out.append((f"TEAM ADDED: team {name}: {'; '.join(goes)}", where))
        elif name not in new:
            out.append((f"TEAM REMOVED: team {name}: its {'; '.join(goes)} go; its jobs lose their guarantee", where))
        else:
            a, b = old[name], new[name]
            moved = _moved("guaranteed", a.quota, b.quota)
            if (a.strategy, a.borrow_limit) != (b.strategy, b.borrow_limit):
                moved.append(f"sharing {_sharing_text(a)} -> {_sharing_text(b)}")
            moved += _moved("may borrow at most", a.absolute, b.absolute) if b.strategy == "LendAndBorrow" else []
            moved += [f"fair-share weight {a.weight} -> {b.weight}"] if a.weight != b.weight else []
            moved += [f"preempts its own tasks {a.preempt} -> {b.preempt}"] if a.preempt != b.preempt else []
            moved += [f"quota {'enabled' if b.active else 'disabled'}"] if a.active != b.active else []
            if moved:
                out.append((f"TEAM QUOTA: team {name}: {'; '.join(moved)}", where))
    out += _access(before, after, old | new)
    return out


def _access(before: list[StackSummary], after: list[StackSummary], known: dict[str, Team]) -> list[tuple[str, list[str]]]:
    old, new = access(before), access(after)
    namespaces = {_team_grant(t): t for t in known}
    out = []
    for principal in sorted(old.keys() | new.keys()):
        gained, lost = new.get(principal, set()) - old.get(principal, set()), old.get(principal, set()) - new.get(principal, set())
        for verb, grants in (("GAINED", gained), ("LOST", lost)):
            for grant in sorted(grants):
                team = namespaces.get(grant)
                where = ([f"governance.teams[{team}].principals[{principal}]"] if team
                         else [f"eks.admin_principal_arns[{principal}]"] if grant == "cluster admin" else [])
                out.append((f"ACCESS {verb}: {principal} -> {grant}", where))
    return out


# -- the jobs a change lets in or keeps out: the one admission model's answers on both sides ------


def _unit(largest: admission.Largest, n: int) -> str:
    unit = largest.unit if largest.unit.endswith("slice") else "node"
    return f"{unit}{'s' if n != 1 else ''}"


def jobs(old: Settings, new: Settings) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """What a change does to whether jobs are admitted, as infra/admission.py (the model validate,
    cdk synth and render-job judge by) answers for the config before and after:
    - JOBS INADMISSIBLE: the largest job a team can run on a group, borrowing all it may, shrinks:
      its jobs of the sizes in between wait in its queue forever (Kueue never admits a workload
      above its queue's potential maximum);
    - JOB BORROWS: the sample job, guaranteed before, is admitted only by borrowing now (it waits
      while the lenders use their quota, and is preempted when they reclaim it);
    - GUARANTEE UNBACKED: the teams' quotas of a type come to add up past what its groups hold
      (governance.allow_oversubscription lets validate pass it): the teams whose guarantee the
      change leaves unbacked are named, and who took it;
    - lines for a guarantee that shrinks and a verdict that improves.
    A sample job no team can hold is not here: validation refuses that config, so the review of
    such a change is that refusal (cdk synth's too)."""
    lines: list[str] = []
    callouts: list[tuple[str, list[str]]] = []
    before = {t.name: t for t in old.governance.teams}
    for team in new.governance.teams:
        if team.name not in before:
            continue  # TEAM ADDED says what it holds
        was = {(j.group, j.unit): j for j in admission.largest_jobs(old, before[team.name])}
        for now in admission.largest_jobs(new, team):
            prev = was.get((now.group, now.unit))
            if prev is None:
                continue
            where = f"on group {now.group} ({now.instance_type})"
            if now.with_borrowing < prev.with_borrowing:
                sizes = (f"{now.with_borrowing + 1} to {prev.with_borrowing}" if prev.with_borrowing > now.with_borrowing + 1
                         else f"{prev.with_borrowing}")
                callouts.append((
                    f"JOBS INADMISSIBLE: team {team.name}'s jobs of {sizes} {_unit(now, prev.with_borrowing)} {where} can never be "
                    f"admitted now: the most it can hold, borrowing all it may, goes from {prev.with_borrowing} to "
                    f"{now.with_borrowing} (guaranteed {prev.guaranteed} -> {now.guaranteed}); such jobs wait in its queue forever",
                    [f"governance.teams[{team.name}]", "governance.teams", f"hyperpod.instance_groups[{now.group}]"],
                ))
            elif now.guaranteed < prev.guaranteed:
                lines.append(f"Jobs: team {team.name}'s jobs of {now.guaranteed + 1} to {prev.guaranteed} {_unit(now, 2)} {where} "
                             f"now run only by borrowing (guaranteed {prev.guaranteed} -> {now.guaranteed})")
    callouts += _unbacked(old, new)
    job_before, job_now = admission.sample_job(old), admission.sample_job(new)
    if job_before is not None and job_now is not None and job_before.verdict != job_now.verdict:
        if job_before.verdict == "guaranteed" and job_now.verdict == "borrowing":
            callouts.append((f"JOB BORROWS: the sample job {job_now.job} was guaranteed and is admitted only by borrowing now: "
                             f"{job_now.line}", [job_now.field, f"governance.teams[{job_now.team}]", "governance.teams"]))
        else:
            lines.append(f"Job {job_now.job}: admission {job_before.verdict} -> {job_now.verdict} ({job_now.line})")
    return lines, callouts


def _unbacked(old: Settings, new: Settings) -> list[tuple[str, list[str]]]:
    """A guarantee no node backs that the baseline did not have: infra/admission.py's
    oversubscribed(), which validate warns of, for both configs."""
    capacity = old.resource_capacity()
    was = {o.instance_type: o for o in admission.oversubscribed(old.governance.teams, capacity)}
    callouts = []
    for over in admission.oversubscribed(new.governance.teams, new.resource_capacity()):
        prev = was.get(over.instance_type)
        if prev is not None and (prev.kind, prev.asks, prev.have) == (over.kind, over.asks, over.have):
            continue
        before = {t.name: admission.quota_of(t, over.instance_type, capacity).get(over.kind, 0) for t in old.governance.teams}
        raised = [t for t, n in over.asks if n > before.get(t, 0) + admission.EPSILON]
        holders = [(t, n) for t, n in over.asks if n and t not in raised] or [(t, n) for t, n in over.asks if n]
        spec = catalogue.lookup(over.instance_type)
        named = ", ".join(f"team {t}'s guarantee of {admission.amount(over.kind, n, spec)}" for t, n in holders)
        taken = f"; raised by {', '.join(raised)}" if raised else ""
        every = ", ".join(f"{t} {admission.amount(over.kind, n, spec)}" for t, n in over.asks if n)
        callouts.append((
            f"GUARANTEE UNBACKED: {named} of {over.instance_type} {'is' if len(holders) == 1 else 'are'} no longer backed by "
            f"nodes: the teams' quotas add up to "
            f"{admission.amount(over.kind, over.total, spec)}, above the cluster's {admission.amount(over.kind, over.have, spec)} "
            f"({every}{taken}), which governance.allow_oversubscription lets pass; while the others use their quota, a job within "
            "the guarantee is admitted and finds no node",
            [*(f"governance.teams[{t}].quotas" for t in raised), "governance.allow_oversubscription", "hyperpod.instance_groups"],
        ))
    return callouts
