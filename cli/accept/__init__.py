"""`hyperpod-cdk accept`: prove a deployed cluster before anyone trains on it.

Per GPU group (acceptance.instance_groups, or every group of whole NVIDIA GPUs):
  1. nodes: every node of the group is there, Ready and Schedulable (HyperPod's health label);
  2. diagnostics: DCGM level 2 on each node, every failed test named with its node;
  3. fabric: NCCL all_reduce_perf across all its nodes over EFA, judged against the bus
     bandwidth the references publish for the instance type (infra/catalogue.py); a fabric
     that falls short is run again in pairs, and a node short in each of its pairs is named;
  4. HyperPod's on-demand deep health check (SageMaker StartClusterHealthCheck) where the
     type has one, each node's status after it.
Per node of every instance group: 5. the metadata guard: a pod there finds the instance
metadata service out of reach (a timeout); and the agents behind it (the training operator's
controller, HyperPod's agents, the collectors, the FSx controller) Ready with no metadata errors.
Per accelerated group: 5a. HyperPod's health-monitoring agent Ready on each Ready node (it is on
the pod network, behind the guard, and writes the labels HyperPod's node recovery acts on).
With teams: 6a. what Kueue queues: each job kind a team may create (manifests/tenancy.py
QUEUED_KINDS) among the integrations of Kueue's live configuration (the kueue-manager-config
ConfigMap), the kind named where it is not.
Per team namespace, with or without such a group (they need no GPU):
  6. tenancy: a privileged pod refused, the instance metadata service out of reach, its pods
     reached from their own namespace and then, only once they answer there, not from the
     acceptance namespace nor another team's (a timeout: a refused connection or an unknown name
     proves no policy).
kubectl runs with the user's kubeconfig, boto3 with the usual credential chain, as the other
commands do. `--from DIR` reads a recorded run instead (kubectl and aws outputs, see
tests/fixtures/acceptance/), which is how the tests and the README's report are made. What
NCCL and DCGM print is read and judged in cli/diagnostics.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from cli.accept.cluster import (  # noqa: F401  (re-exported: the command's callers and tests name them as accept's)
    AGENT_LOG_SINCE, DEEP_HEALTH_CHECK_POLL_S, DEEP_HEALTH_CHECK_WAIT_S, GROUP_LABEL, HEALTH_LABEL, IMDS_ERRORS, KUEUE_CONFIG_KEY,
    KUEUE_CONFIG_MAP, KUEUE_DEFAULT_FRAMEWORKS, KUEUE_NAMESPACE, POLL_S, RECORDED_NOTHING, AcceptError, Check, Kubectl, Recording,
    Report, _ready, to_yaml,
)
from cli.diagnostics import clip, judge_dcgm, judge_nccl, pair_rounds, parse_dcgm, parse_nccl, suspects
from infra import catalogue
from infra.checks.acceptance import accepted_groups
from infra.config import Settings
from infra.config.acceptance import unprovable
from manifests import acceptance as m


def group_nodes(doc: dict, group) -> tuple[list[str], list[Check]]:
    """The group's nodes fit to test, and a failed check for each one that is not (or missing)."""
    try:
        items = [i for i in doc["items"] if i["metadata"].get("labels", {}).get(GROUP_LABEL) == group.name]
    except (KeyError, TypeError, AttributeError):
        raise AcceptError("the node list is not `kubectl get nodes -o json` output") from None
    fit, checks = [], []
    for item in sorted(items, key=lambda i: i["metadata"]["name"]):
        node, health = item["metadata"]["name"], item["metadata"]["labels"].get(HEALTH_LABEL, "(no label)")
        if _ready(item) and health == "Schedulable":
            fit.append(node)
        else:
            state = "Ready" if _ready(item) else "not Ready"
            checks.append(Check(group.name, "nodes", node, "fail", f"{state}, health {health}: not tested"))
    expected = 0 if group.autoscaled else group.count
    summary = f"{len(items)} of {expected} nodes present, {len(fit)} Ready and Schedulable"
    if len(items) < expected:
        checks.insert(0, Check(group.name, "nodes", f"{len(items)}/{expected}", "fail", summary + f"; {expected - len(items)} missing"))
    else:
        checks.insert(0, Check(group.name, "nodes", f"{len(items)}/{expected}", "pass" if not checks else "fail", summary))
    return fit, checks


def _wait(cluster, objects: list[dict], *, sleep: Callable, clock: Callable) -> list[dict]:
    """Wait until each check has finished or its deadline has passed; the ones still running."""
    if not objects:
        return []
    deadline = clock() + max(o["spec"].get("activeDeadlineSeconds") or o["spec"]["runPolicy"]["activeDeadlineSeconds"]
                             for o in objects) + 2 * POLL_S
    pending = list(objects)
    while pending and clock() < deadline:
        pending = [o for o in pending if not cluster.finished(o)]
        if pending:
            sleep(POLL_S)
    return pending


def _pair_check(settings: Settings, cluster, group, nodes: list[str], *, sleep, clock) -> list[Check]:
    """Run the fabric test in pairs and name the nodes short in every pair they were in."""
    results: dict[tuple[str, str], bool] = {}
    for r, round_ in enumerate(pair_rounds(nodes), 1):
        jobs = {pair: m.nccl_job(settings, group, pair, run=m.name("nccl", group.name, f"r{r}", str(i)))
                for i, pair in enumerate(round_)}
        cluster.apply(list(jobs.values()))
        _wait(cluster, list(jobs.values()), sleep=sleep, clock=clock)
        for pair, job in jobs.items():
            status, _ = judge_nccl(parse_nccl(cluster.result_log(job["metadata"]["name"])), group.instance_type,
                                   settings.acceptance.min_bandwidth_percent)
            results[pair] = status != "fail"
        cluster.delete(list(jobs.values()))
    return [Check(group.name, "nccl pairs", node, "fail", "short in every pair it ran in: the fabric's weak node")
            for node in suspects(results)]


def chosen_groups(settings: Settings, groups: Sequence[str] = ()) -> list:
    """The groups whose GPUs this run proves: every accepted group, or those of `groups`."""
    return [g for g in accepted_groups(settings) if not groups or g.name in groups]


def nodes_to_test(settings: Settings, cluster, groups: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Per chosen group, its nodes fit to test (Ready and Schedulable)."""
    chosen = chosen_groups(settings, groups or ())
    doc = cluster.nodes() if chosen else {"items": []}
    return {g.name: group_nodes(doc, g)[0] for g in chosen}


def _finish(cluster, objects: list[dict], *, sleep, clock) -> set[str]:
    """Apply checks and wait for them: the names of those that ran out of time."""
    cluster.apply(objects)
    return {o["metadata"]["name"] for o in _wait(cluster, objects, sleep=sleep, clock=clock)}


def run(settings: Settings, cluster, *, sagemaker=None, runtime=None, groups: Sequence[str] = (), deep_health_check: bool = True,
        keep: bool = False, sleep: Callable = time.sleep, clock: Callable = time.monotonic) -> Report:
    """The GPU groups' checks, then each team namespace's tenancy checks, then the endpoint a team
    serves (`runtime`: SageMaker Runtime, for its request). The tenancy checks need no GPU, so they
    run whether or not a group has whole NVIDIA GPUs to prove (a cluster whose GPUs are all cut into
    MIG slices gets them too)."""
    report = Report(settings.env_name)
    chosen = chosen_groups(settings, groups)
    teams = settings.governance.teams
    if not chosen and not teams:
        raise AcceptError(f"{settings.env_name} has nothing to prove: no group of whole NVIDIA GPUs (acceptance.instance_groups) "
                          "and no team namespace (governance.teams)")
    doc = cluster.nodes()  # read before anything is applied
    # The GPU checks run in it, and so do the guard probes and the tenancy probe from outside the team namespaces.
    cluster.apply([m.namespace()])
    report.checks += [Check(g.name, "gpu checks", "group", "skip", why) for g in settings.hyperpod.instance_groups
                      if catalogue.lookup(g.instance_type) and g.spec.is_accelerated and (why := unprovable(g))]
    if chosen:
        report.checks += gpu_checks(settings, cluster, chosen, doc, keep=keep, sleep=sleep, clock=clock)
        if deep_health_check and settings.acceptance.deep_health_check:
            report.checks += deep_health_checks(settings, chosen, cluster, sagemaker, sleep=sleep, clock=clock)
    from cli.accept import software

    report.checks += guard_checks(settings, cluster, doc, keep=keep, sleep=sleep, clock=clock)
    report.checks += software.agent_checks(settings, cluster)
    report.checks += software.health_agent_checks(settings, cluster, doc)
    if teams:
        report.checks += software.queue_checks(cluster)
    for team in teams:
        report.checks += tenancy_checks(settings, cluster, team.name, keep=keep, sleep=sleep, clock=clock)
    from cli.accept import serving

    report.checks += serving.endpoint_checks(settings, cluster, runtime)
    return report


def needs_sagemaker(settings: Settings, groups: Sequence[str] = ()) -> bool:
    """Whether the run will call SageMaker: some chosen group's type has deep health checks."""
    return settings.acceptance.deep_health_check and bool(_dhc_groups(chosen_groups(settings, groups)))


def gpu_checks(settings: Settings, cluster, chosen: list, doc: dict, *, keep: bool, sleep: Callable, clock: Callable) -> list[Check]:
    """Given the node list: diagnostics on every node first, then the fabric: each DCGM Job and
    each NCCL worker holds all of its node's GPUs, so the two cannot run on a node at once."""
    checks: list[Check] = []
    fit = {}
    for group in chosen:
        fit[group.name], found = group_nodes(doc, group)
        checks += found
    dcgm = {(g.name, node): m.dcgm_job(settings, g, node) for g in chosen for node in fit[g.name]}
    late = _finish(cluster, list(dcgm.values()), sleep=sleep, clock=clock)
    for (group_name, node), job in dcgm.items():
        status, detail = judge_dcgm(parse_dcgm(cluster.result_log(job["metadata"]["name"])))
        if job["metadata"]["name"] in late:
            status, detail = "fail", f"did not finish within {m.DCGM_DEADLINE_S} s"
        checks.append(Check(group_name, "dcgm", node, status, detail))
    if not keep:
        cluster.delete(list(dcgm.values()))
    fabrics = {g.name: m.nccl_job(settings, g, fit[g.name]) for g in chosen if len(fit[g.name]) >= 2}
    late = _finish(cluster, list(fabrics.values()), sleep=sleep, clock=clock)
    for group in chosen:
        nodes, job = fit[group.name], fabrics.get(group.name)
        if job is None:
            checks.append(Check(group.name, "nccl", "fabric", "skip", f"{len(nodes)} node(s) fit to test: no fabric between nodes"))
            continue
        status, detail = judge_nccl(parse_nccl(cluster.result_log(job["metadata"]["name"])), group.instance_type,
                                    settings.acceptance.min_bandwidth_percent)
        if job["metadata"]["name"] in late:
            status, detail = "fail", f"did not finish within {m.NCCL_DEADLINE_S} s"
        checks.append(Check(group.name, "nccl", f"fabric ({len(nodes)} nodes)", status, detail))
        if not keep:
            cluster.delete([job])
        if status == "fail" and len(nodes) > 2:
            checks += _pair_check(settings, cluster, group, nodes, sleep=sleep, clock=clock)
    return checks


# ------------------------------------------------------------------ tenancy


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _verdicts(cluster, probes: dict[str, dict], *, sleep: Callable, clock: Callable) -> dict[str, tuple[str, str]]:
    """Apply the probes, wait for them: per key, (verdict, wget's words or why there is none)."""
    cluster.apply(list(probes.values()))
    late = {o["metadata"]["name"] for o in _wait(cluster, list(probes.values()), sleep=sleep, clock=clock)}
    out = {}
    for key, obj in probes.items():
        run_name = obj["metadata"]["name"]
        if run_name in late:
            out[key] = ("", f"did not finish within {m.PROBE_DEADLINE_S} s")
            continue
        lines = [line.strip() for line in cluster.result_log(run_name, obj["metadata"]["namespace"]).splitlines() if line.strip()]
        out[key] = (lines[-1], " ".join(lines[-2:-1])) if lines else ("", "no result in the log")
    return out


def _judged(verdict: str, words: str, want: str) -> tuple[str, str]:
    if verdict == want:
        return "pass", verdict
    if verdict == m.FAILED and want == m.BLOCKED:
        return "fail", clip(f"{words or verdict}: not a timeout, so no proof that a policy dropped it")
    return "fail", clip(f"{verdict}: {words}" if verdict and words else verdict or words)


def tenancy_checks(settings: Settings, cluster, team: str, *, keep: bool = False, sleep: Callable, clock: Callable) -> list[Check]:
    """From the team's namespace: the instance metadata service out of reach, a privileged pod
    refused, its listener answering its own namespace; then, only once it has, the listener out
    of reach (a timeout: a policy drops packets) from the acceptance namespace and from another
    team's."""
    from infra import naming

    ns = naming.team_names(team).namespace
    objects = m.tenancy_objects(settings, team)
    checks = []
    refusal = cluster.refusal(objects["privileged"])
    refused = refusal is not None and "violates PodSecurity" in refusal
    checks.append(Check(ns, "tenancy", "privileged pod", "pass" if refused else "fail",
                        clip(refusal[refusal.index("violates PodSecurity"):]) if refused
                        else clip(refusal) if refusal else "admitted: the namespace enforces no Pod Security level"))
    cluster.apply([objects["listener"], objects["service"]])
    inside = _verdicts(cluster, {k: objects[k] for k in ("imds", "same namespace")}, sleep=sleep, clock=clock)
    for key, want, subject in (("imds", m.BLOCKED, "instance metadata"), ("same namespace", m.CONNECTED, "from its own namespace")):
        checks.append(Check(ns, "tenancy", subject, *_judged(*inside[key], want)))
    outside_keys = [k for k in ("other namespace", "other team") if k in objects]
    subjects = {"other namespace": f"from {m.NAMESPACE}",
                "other team": f"from {objects['other team']['metadata']['namespace']}" if "other team" in objects else ""}
    started = [objects["listener"], objects["service"], *(objects[k] for k in ("imds", "same namespace"))]
    if inside["same namespace"][0] == m.CONNECTED:
        outside = _verdicts(cluster, {k: objects[k] for k in outside_keys}, sleep=sleep, clock=clock)
        started += [objects[k] for k in outside_keys]
        checks += [Check(ns, "tenancy", subjects[k], *_judged(*outside[k], m.BLOCKED)) for k in outside_keys]
    else:
        checks += [Check(ns, "tenancy", subjects[k], "fail", "not run: the listener never answered from its own namespace, "
                         "so a blocked connection would prove nothing") for k in outside_keys]
    if not keep:
        cluster.delete(started)
    return checks


def guard_probes(settings: Settings, doc: dict) -> dict[tuple[str, str], dict]:
    """(group, node) -> the metadata guard's probe, for every Ready node of every instance group."""
    probes = {}
    for group in settings.hyperpod.instance_groups:
        items = [i for i in doc.get("items", []) if i["metadata"].get("labels", {}).get(GROUP_LABEL) == group.name]
        for node in sorted(i["metadata"]["name"] for i in items if _ready(i)):
            probes[(group.name, node)] = m.guard_probe(settings, group, node)
    return probes


def guard_checks(settings: Settings, cluster, doc: dict, *, keep: bool = False, sleep: Callable, clock: Callable) -> list[Check]:
    """On every Ready node of every instance group, a pod on the pod network finds the instance
    metadata service out of reach (on_create.sh's guard; nodes made before it lack it)."""
    probes = guard_probes(settings, doc)
    checks = [Check(g.name, "metadata guard", "group", "skip" if g.autoscaled else "fail", "no Ready node to prove it on")
              for g in settings.hyperpod.instance_groups if not any(k[0] == g.name for k in probes)]
    verdicts = _verdicts(cluster, {f"{g}/{n}": o for (g, n), o in probes.items()}, sleep=sleep, clock=clock) if probes else {}
    for (group, node), obj in probes.items():
        checks.append(Check(group, "metadata guard", node, *_judged(*verdicts[f"{group}/{node}"], m.BLOCKED)))
    if probes and not keep:
        cluster.delete(list(probes.values()))
    return checks


# ------------------------------------------------------------------ deep health check


def _dhc_groups(groups) -> list:
    return [g for g in groups if g.spec.deep_health_checks and not g.autoscaled]


def deep_health_checks(settings: Settings, groups, cluster, sagemaker, *, sleep, clock) -> list[Check]:
    """HyperPod's on-demand deep health check (StartClusterHealthCheck in SageMaker's API) on
    the groups whose type has one, then each node's status: HyperPod reboots or replaces the
    nodes that fail, so a node not Running afterwards is named with HyperPod's message."""
    checked = _dhc_groups(groups)
    out = [Check(g.name, "deep health check", "group", "skip", f"{g.instance_type} has no deep health checks")
           for g in groups if g not in checked]
    if not checked:
        return out
    recorded = getattr(cluster, "cluster_nodes", None)
    if recorded is not None:
        nodes = recorded()
        if nodes is None:
            return out + [Check(g.name, "deep health check", "group", "skip", "not in the recording") for g in checked]
    else:
        nodes = _run_deep_health_check(settings, checked, sagemaker, sleep=sleep, clock=clock)
        if nodes is None:
            return out + [Check(g.name, "deep health check", "group", "fail",
                                f"still in progress after {DEEP_HEALTH_CHECK_WAIT_S // 60} minutes") for g in checked]
    names = {g.name for g in checked}
    for node in nodes.get("ClusterNodeSummaries", []):
        if node["InstanceGroupName"] not in names:
            continue
        status = node["InstanceStatus"]["Status"]
        message = node["InstanceStatus"].get("Message", "")
        subject = f"hyperpod-{node['InstanceId']}"
        ok = status == "Running"
        out.append(Check(node["InstanceGroupName"], "deep health check", subject, "pass" if ok else "fail",
                         status + (f": {message}" if message else "")))
    return out


def _run_deep_health_check(settings: Settings, groups, sagemaker, *, sleep, clock) -> dict | None:
    cluster = settings.hyperpod_cluster_name
    started = time.time()
    sagemaker.start_cluster_health_check(
        ClusterName=cluster,
        DeepHealthCheckConfigurations=[
            {"InstanceGroupName": g.name, "DeepHealthChecks": list(g.deep_health_checks or ("InstanceStress", "InstanceConnectivity"))}
            for g in groups
        ],
    )
    deadline = clock() + DEEP_HEALTH_CHECK_WAIT_S
    while True:
        ops = sagemaker.list_cluster_operations(ClusterName=cluster, Type="DeepHealthCheck", SortBy="CreationTime",
                                                SortOrder="Descending", MaxResults=10)["ClusterOperationSummaries"]
        ours = [o for o in ops if o["CreationTime"].timestamp() >= started - 60]
        if ours and all(o["Status"] != "InProgress" for o in ours):
            break
        if clock() >= deadline:
            return None
        sleep(DEEP_HEALTH_CHECK_POLL_S)
    summaries, token = [], None
    while True:
        page = sagemaker.list_cluster_nodes(ClusterName=cluster, **({"NextToken": token} if token else {}))
        summaries += page["ClusterNodeSummaries"]
        token = page.get("NextToken")
        if not token:
            return {"ClusterNodeSummaries": summaries}


# ------------------------------------------------------------------ the report


def to_text(report: Report) -> str:
    rows = [(c.group, c.check, c.subject, c.status.upper(), c.detail) for c in report.checks]
    heads = ("group", "check", "subject", "result", "detail")
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(4)]
    lines = [f"Acceptance run on {report.env}", ""]
    lines += ["  ".join(h.ljust(w) for h, w in zip(heads[:4], widths)) + "  " + heads[4]]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    lines.append("")
    if report.passed:
        lines.append(f"PASS: {len(report.checks)} checks, none failed")
    else:
        failed = sum(c.status == "fail" for c in report.checks)
        named = ", ".join(report.failing_nodes) or "none named"
        lines.append(f"FAIL: {failed} of {len(report.checks)} checks failed; nodes that fall short: {named}")
    return "\n".join(lines) + "\n"
