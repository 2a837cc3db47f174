"""`hyperpod-cdk team NAME`: what a team member needs to reach the cluster and submit work.

Built from the validated settings with the same names the stacks give the objects (a test
reads every item back from the synthesized templates): the role to assume and the kubeconfig
command, what that role's IAM must not hold (manifests/teams.py ROLE_MUST_NOT_HOLD), the namespace, local queue and cluster queue, the priority classes, the topology
annotation the cluster's jobs use, the FSx claim, the team's quotas in plain words, the largest
job it can run on each group (guaranteed and with borrowing, from infra/admission.py), and the
command that renders a job into the team's queue.
"""

from __future__ import annotations

from infra import admission, catalogue, naming
from infra.config import QuotaResource, Settings, Team
from manifests.job import FSX_CLAIM, credentials_caution
from manifests.teams import ROLE_MUST_NOT_HOLD


class UnknownTeam(ValueError):
    pass


def team(settings: Settings, name: str) -> Team:
    found = next((t for t in settings.governance.teams if t.name == name), None)
    if found is None:
        known = ", ".join(t.name for t in settings.governance.teams) or "(none)"
        raise UnknownTeam(f"{name!r} is not a team of {settings.env_name}; teams: {known}")
    return found


def _amount(q: QuotaResource) -> str:
    spec = catalogue.figures(q.instance_type)
    parts = []
    if q.count is not None:
        whole = f"{q.count} instance{'s' if q.count != 1 else ''}"
        if spec is not None:
            extra = f"{q.count * spec.accelerators} {spec.accelerator} GPUs, " if spec.is_accelerated else ""
            whole += f" ({extra}{q.count * spec.vcpus} vCPUs, {q.count * spec.memory_gib} GiB)"
        parts.append(whole)
    if q.accelerators is not None:
        parts.append(f"{q.accelerators} {spec.accelerator if spec else ''} GPUs".replace("  ", " "))
    if q.accelerator_partition is not None:
        parts.append(f"{q.accelerator_partition.count} MIG slices {q.accelerator_partition.type.removeprefix('mig-')}")
    if q.vcpu is not None:
        parts.append(f"{q.vcpu:g} vCPUs")
    if q.memory_gib is not None:
        parts.append(f"{q.memory_gib:g} GiB of memory")
    return f"{', '.join(parts)} of {q.instance_type}"


def quotas_in_words(t: Team) -> list[str]:
    lines = [f"guaranteed: {_amount(q)}" for q in t.quotas]
    sharing = {
        "LendAndBorrow": "lends its idle share and borrows what other teams lend, up to "
        + (f"{t.borrow_limit}% of its quota" if t.borrow_limit is not None else f"{admission.DEFAULT_BORROW_LIMIT}% of its quota (SageMaker's default)"),
        "Lend": "lends its idle share, never borrows",
        "DontLend": "keeps its share idle rather than lend it, never borrows",
    }[t.sharing]
    lines.append(sharing)
    lines += [f"borrows at most {_amount(q)}" for q in t.absolute_borrow_limits]
    lines.append(
        "a higher-priority job of the team preempts a lower-priority one" if t.preempt == "LowerPriority" else "never preempts its own jobs"
    )
    lines.append(f"fair-share weight {t.fair_share_weight}" + ("" if t.active else "; the quota is switched off (active: false)"))
    return lines


def largest_jobs_in_words(settings: Settings, t: Team) -> list[str]:
    """The largest job of the sample's shape the team can run on each group it has a share of
    (infra/admission.py, which validation and the review read too)."""
    lines = []
    for j in admission.largest_jobs(settings, t):
        unit = "one-slice pod" if j.unit.endswith("slice") else "node"
        what = f"{j.unit.removesuffix(' slice')} slices of {j.instance_type}" if j.unit.endswith("slice") else j.instance_type
        lines.append(f"{what} (group {j.group}): {j.guaranteed} {unit}{'s' * (j.guaranteed != 1)} guaranteed, "
                     f"{j.with_borrowing} with borrowing")
    return lines


def build(settings: Settings, name: str) -> dict:
    """The kit as a plain mapping (what --format json writes)."""
    t = team(settings, name)
    names = naming.team_names(t.name)
    kubeconfig = settings.kubeconfig_command
    topology = settings.topology
    return {
        "environment": settings.env_name,
        "team": t.name,
        "roles": list(t.principals),
        "kubeconfig": [f"{kubeconfig} --role-arn {arn}" for arn in t.principals] or [kubeconfig],
        # The endpoint has no public side (eks.endpoint_access private): the kubeconfig answers only there.
        "reach_from": settings.private_endpoint_reach or None,
        "iam_needs": "eks:DescribeCluster on the cluster, for update-kubeconfig",
        "iam_must_not_hold": {", ".join(actions): why for actions, why in ROLE_MUST_NOT_HOLD},
        "kubernetes_group": names.group,
        "namespace": names.namespace,
        "local_queue": names.local_queue,
        "cluster_queue": names.cluster_queue,
        "queue_label": {"kueue.x-k8s.io/queue-name": names.local_queue},
        "priority_classes": {pc.name: naming.priority_class_name(pc.name) for pc in settings.governance.priority_classes},
        "priority_label": "kueue.x-k8s.io/priority-class",
        "topology_annotation": (
            {f"kueue.x-k8s.io/podset-{topology.mode}-topology": topology.level} if topology.mode != "none" else {}
        ),
        "fsx_claim": FSX_CLAIM if settings.fsx.enabled else None,
        "quotas": quotas_in_words(t),
        "largest_job": largest_jobs_in_words(settings, t),
        "render_job": f"hyperpod-cdk render-job -c env={settings.env_name} --team {t.name} --image <training image URI> > job.yaml",
        "render_job_caution": credentials_caution(settings, t.name),
        "submit": f"kubectl apply -n {names.namespace} -f job.yaml && kubectl get workloads -n {names.namespace}",
    }


def to_text(kit: dict) -> str:
    """The kit as a person reads it."""
    roles = kit["roles"] or ["(none: governance.teams[].principals is empty; ask a cluster admin for an access entry)"]
    priority = ", ".join(f"{k} ({v})" for k, v in kit["priority_classes"].items()) or "(none)"
    topology = ", ".join(f"{k}: {v}" for k, v in kit["topology_annotation"].items()) or "(none: the cluster places jobs freely)"
    lines = [
        f"# Team {kit['team']} on {kit['environment']}",
        "",
        "Reach the cluster",
        *(f"  assume role   {r}" for r in roles),
        *(f"  kubeconfig    {c}" for c in kit["kubeconfig"]),
        *([f"  private API   the endpoint is private: kubectl works only {kit['reach_from']}"] if kit["reach_from"] else []),
        f"  IAM needs     {kit['iam_needs']}",
        "  IAM must not hold (each undoes the cluster's isolation of your team):",
        *(f"    {actions}: {why}" for actions, why in kit["iam_must_not_hold"].items()),
        f"  Kubernetes    group {kit['kubernetes_group']}: your namespace only",
        "",
        "Submit work",
        f"  namespace     {kit['namespace']}",
        f"  local queue   {kit['local_queue']}  (label kueue.x-k8s.io/queue-name)",
        f"  priorities    {priority}  (label {kit['priority_label']})",
        f"  topology      {topology}  (pod template annotation)",
        f"  shared data   {('claim ' + kit['fsx_claim'] + ' mounted at /fsx') if kit['fsx_claim'] else '(none: fsx.enabled is false)'}",
        f"  a job file    {kit['render_job']}",
        *([f"                (its AWS access: {kit['render_job_caution']})"] if kit["render_job_caution"] else []),
        f"  submit        {kit['submit']}",
        "",
        "Quota",
        *(f"  {line}" for line in kit["quotas"]),
        "",
        "The largest job you can run",
        *(f"  {line}" for line in kit["largest_job"] or ["(none: the team has no share of any instance group)"]),
        "",
    ]
    return "\n".join(lines)
