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

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cli.diagnostics import clip, judge_dcgm, judge_nccl, pair_rounds, parse_dcgm, parse_nccl, suspects
from infra import catalogue
from infra.checks.acceptance import accepted_groups
from infra.config import Settings
from infra.config.acceptance import unprovable
from manifests import acceptance as m

GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
# How often the run looks at its checks; each check's own limit is its activeDeadlineSeconds.
POLL_S = 15
# HyperPod's deep health checks take 60 to 90 minutes on p5 (HyperPod deep health check
# docs; FACTS): the run waits two hours for the operation, polling each minute.
DEEP_HEALTH_CHECK_WAIT_S = 2 * 3600
DEEP_HEALTH_CHECK_POLL_S = 60


# What the AWS SDKs log when instance metadata is out of reach, as a pod on the pod network
# finds it behind the node guard: botocore (utils.py, its IMDS fetcher: "Max number of attempts
# exceeded (%s) when attempting to retrieve data from metadata service.", and "Unable to retrieve
# token for use in IMDSv2 call"), aws-sdk-go (awserr codes EC2MetadataRequestError and
# EC2MetadataError) and aws-sdk-go-v2 ("operation error ec2imds", "no EC2 IMDS role found").
IMDS_ERRORS = (
    "attempting to retrieve data from metadata service", "Unable to retrieve token for use in IMDSv2 call",
    "EC2MetadataRequestError", "EC2MetadataError", "operation error ec2imds", "no EC2 IMDS role found",
)
AGENT_LOG_SINCE = "1h"
# Kueue's configuration as its manifests install it (kubernetes-sigs/kueue config/components/manager:
# the ConfigMap kueue-manager-config in kueue-system, key controller_manager_config.yaml), which
# task governance's Kueue reads too.
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIG_MAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
# Kueue's default integrations when its configuration names none (Kueue's configuration
# reference, Integrations.Frameworks: batch/job is the default).
KUEUE_DEFAULT_FRAMEWORKS = ("batch/job",)
# A recording without the file: the check is skipped, not failed.
RECORDED_NOTHING = {"recorded": False}


class AcceptError(RuntimeError):
    """A problem to report in one line (no kubectl, kubectl refused, a broken recording)."""


# ------------------------------------------------------------------ the report's lines


@dataclass(frozen=True)
class Check:
    group: str
    check: str
    subject: str
    status: str  # pass | fail | warn | skip
    detail: str


@dataclass
class Report:
    env: str
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    @property
    def failing_nodes(self) -> list[str]:
        nodes = []
        for c in self.checks:
            if c.status == "fail" and c.subject.startswith("hyperpod-") and c.subject not in nodes:
                nodes.append(c.subject)
        return nodes


# ------------------------------------------------------------------ the cluster


class Kubectl:
    """The cluster through the user's kubectl and kubeconfig."""

    def __init__(self, run: Callable | None = None):
        if run is None and shutil.which("kubectl") is None:
            raise AcceptError("kubectl is not on PATH; install it, or pass --from DIR (a recorded run)")
        self._run = run or subprocess.run

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = self._run(["kubectl", *args], input=stdin, capture_output=True, text=True)
        if result.returncode != 0:  # kubectl's own verdict is its last "error:" line
            lines = [line.strip() for line in result.stderr.splitlines() if line.strip()] or [f"exit status {result.returncode}"]
            last = next((line for line in reversed(lines) if line.startswith("error:")), lines[-1])
            raise AcceptError(f"kubectl {args[0]} failed: {last[-300:]}")
        return result.stdout

    def nodes(self) -> dict:
        return json.loads(self._kubectl("get", "nodes", "-o", "json"))

    def apply(self, objects: list[dict]) -> None:
        self._kubectl("apply", "-f", "-", stdin=to_yaml(objects))

    def delete(self, objects: list[dict]) -> None:
        self._kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=to_yaml(objects))

    def finished(self, obj: dict) -> bool:
        kind = "mpijobs.kubeflow.org" if obj["kind"] == "MPIJob" else "jobs"
        namespace = obj["metadata"].get("namespace", m.NAMESPACE)
        doc = json.loads(self._kubectl("get", kind, obj["metadata"]["name"], "-n", namespace, "-o", "json"))
        done = {"Succeeded", "Failed", "Complete"}
        return any(c.get("type") in done and c.get("status") == "True" for c in doc.get("status", {}).get("conditions", []))

    def result_log(self, run: str, namespace: str = m.NAMESPACE) -> str:
        selector = f"{m.RUN_LABEL}={run},{m.ROLE_LABEL}=result"
        return self._kubectl("logs", "-n", namespace, "-l", selector, "--tail=-1")

    def pods(self, namespace: str) -> list[dict]:
        return json.loads(self._kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]

    def pod_log(self, namespace: str, pod: str) -> str:
        return self._kubectl("logs", "-n", namespace, pod, "--all-containers", f"--since={AGENT_LOG_SINCE}")

    def kueue_config(self) -> dict | None:
        """Kueue's ConfigMap as the cluster serves it (`kubectl get -o json`); None where there is none."""
        try:
            return json.loads(self._kubectl("get", "configmap", KUEUE_CONFIG_MAP, "-n", KUEUE_NAMESPACE, "-o", "json"))
        except AcceptError as err:
            if "NotFound" in str(err) or "not found" in str(err):
                return None
            raise

    def refusal(self, obj: dict) -> str | None:
        """The API server's refusal of `obj` in a server-side dry run (admission runs, nothing
        is created), or None where it would be admitted."""
        try:
            self._kubectl("create", "--dry-run=server", "-f", "-", stdin=to_yaml([obj]))
        except AcceptError as err:
            return str(err)
        return None


class Recording:
    """A recorded run in a folder: nodes.json (`kubectl get nodes -o json`), logs/<run>.log
    (each check's result log), list-cluster-nodes.json (`aws sagemaker list-cluster-nodes`
    after the deep health check). Nothing is applied; every check has finished."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        if not (self.folder / "nodes.json").is_file():
            raise AcceptError(f"--from {folder}: no nodes.json (a `kubectl get nodes -o json` dump) in it")
        self.applied: list[dict] = []

    def nodes(self) -> dict:
        try:
            return json.loads((self.folder / "nodes.json").read_text())
        except ValueError as err:
            raise AcceptError(f"--from {self.folder}: nodes.json is not JSON: {err}") from None

    def apply(self, objects: list[dict]) -> None:
        self.applied += objects

    def delete(self, objects: list[dict]) -> None:
        pass

    def finished(self, obj: dict) -> bool:
        return True

    def result_log(self, run: str, namespace: str = m.NAMESPACE) -> str:
        path = self.folder / "logs" / f"{run}.log"
        return path.read_text() if path.is_file() else ""

    def pods(self, namespace: str) -> list[dict] | None:
        """pods/<namespace>.json (`kubectl get pods -n NS -o json`); None where not recorded."""
        path = self.folder / "pods" / f"{namespace}.json"
        return json.loads(path.read_text())["items"] if path.is_file() else None

    def pod_log(self, namespace: str, pod: str) -> str:
        path = self.folder / "pod-logs" / namespace / f"{pod}.log"
        return path.read_text() if path.is_file() else ""

    def refusal(self, obj: dict) -> str | None:
        """dry-run/<name>.txt: the server's answer to the dry run; none recorded, admitted."""
        path = self.folder / "dry-run" / f"{obj['metadata']['name']}.txt"
        return path.read_text().strip() if path.is_file() else None

    def kueue_config(self) -> dict | None:
        """kueue-manager-config.json (`kubectl get configmap kueue-manager-config -n kueue-system
        -o json`); RECORDED_NOTHING where not recorded."""
        path = self.folder / f"{KUEUE_CONFIG_MAP}.json"
        return json.loads(path.read_text()) if path.is_file() else RECORDED_NOTHING

    def cluster_nodes(self) -> dict | None:
        path = self.folder / "list-cluster-nodes.json"
        return json.loads(path.read_text()) if path.is_file() else None


def to_yaml(objects: list[dict]) -> str:
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", []))


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


def run(settings: Settings, cluster, *, sagemaker=None, groups: Sequence[str] = (), deep_health_check: bool = True,
        keep: bool = False, sleep: Callable = time.sleep, clock: Callable = time.monotonic) -> Report:
    """The GPU groups' checks, then each team namespace's tenancy checks. The tenancy checks
    need no GPU, so they run whether or not a group has whole NVIDIA GPUs to prove (a cluster
    whose GPUs are all cut into MIG slices gets them too)."""
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
    report.checks += guard_checks(settings, cluster, doc, keep=keep, sleep=sleep, clock=clock)
    report.checks += agent_checks(settings, cluster)
    report.checks += health_agent_checks(settings, cluster, doc)
    if teams:
        report.checks += queue_checks(cluster)
    for team in teams:
        report.checks += tenancy_checks(settings, cluster, team.name, keep=keep, sleep=sleep, clock=clock)
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


# ------------------------------------------------------------------ the agents that lost instance metadata


def agents(settings: Settings) -> list[tuple[str, str, str | None]]:
    """(what, namespace, service account or None for every pod there) of each agent on the pod
    network that the node guard keeps from instance metadata: the training operator's controller
    (its Pod Identity service account), HyperPod's agents in its namespace, the observability
    collectors, the FSx CSI controller and the inference operator."""
    from addons import fsx_csi, inference_operator, training_operator
    from manifests.tenancy import OBSERVABILITY_NAMESPACE

    out = [("HyperPod agents", training_operator.NAMESPACE, None)]
    if settings.addons.training_operator.enabled:
        out.append(("training operator", training_operator.NAMESPACE, training_operator.SERVICE_ACCOUNT))
    if settings.addons.observability.enabled:
        out.append(("observability collectors", OBSERVABILITY_NAMESPACE, None))
    if settings.fsx.enabled:
        out.append(("FSx CSI controller", "kube-system", fsx_csi.CONTROLLER_SERVICE_ACCOUNT))
    if settings.inference.enabled:  # the controller that serves every endpoint (docs/serving.md)
        out.append(("inference operator", inference_operator.NAMESPACE, inference_operator.CONTROLLER))
    return out


def agent_checks(settings: Settings, cluster) -> list[Check]:
    """Each agent's pods Ready, and none of their logs of the last hour with an SDK's words for
    instance metadata out of reach (IMDS_ERRORS)."""
    checks = []
    for what, namespace, account in agents(settings):
        pods = cluster.pods(namespace)
        if pods is None:
            checks.append(Check(namespace, "agents", what, "skip", "not in the recording"))
            continue
        ours = [p for p in pods if account is None or p.get("spec", {}).get("serviceAccountName") == account]
        if not ours:
            checks.append(Check(namespace, "agents", what, "fail", "no pod runs" + (f" as {account}" if account else "")))
            continue
        problems = [f"{p['metadata']['name']} not Ready" for p in ours if not _ready(p)]
        for pod in ours:
            line = next((line.strip() for line in cluster.pod_log(namespace, pod["metadata"]["name"]).splitlines()
                         if any(e in line for e in IMDS_ERRORS)), None)
            if line:
                problems.append(f"{pod['metadata']['name']}: {line}")
        detail = "; ".join(problems) if problems else f"{len(ours)} pod(s) Ready, no instance metadata errors in the last {AGENT_LOG_SINCE}"
        checks.append(Check(namespace, "agents", what, "fail" if problems else "pass", clip(detail)))
    return checks


# HyperPod's health-monitoring agent (the chart's DaemonSets, aws/sagemaker-hyperpod-cli @ a00b22d17ea9
# charts/health-monitoring-agent/templates/health-monitoring-agent.yaml): its service account, and the
# namespace the chart installs it in. It writes the node-health labels HyperPod's automatic node
# recovery acts on, so a GPU node without it is never recovered by itself.
HEALTH_AGENT_NAMESPACE = "aws-hyperpod"
HEALTH_AGENT_ACCOUNT = "health-monitoring-agent"


def health_agent_checks(settings: Settings, cluster, doc: dict) -> list[Check]:
    """On every Ready node of every accelerated instance group, a Ready pod of the
    health-monitoring agent (on the pod network, so behind the node guard: agent_checks reads
    its logs for instance metadata errors)."""
    groups = [g for g in settings.hyperpod.instance_groups if catalogue.lookup(g.instance_type) and g.spec.is_accelerated]
    if not groups:
        return []
    pods = cluster.pods(HEALTH_AGENT_NAMESPACE)
    if pods is None:
        return [Check(g.name, "health agent", "group", "skip", "not in the recording") for g in groups]
    ready_on = {p.get("spec", {}).get("nodeName") for p in pods
                if p.get("spec", {}).get("serviceAccountName") == HEALTH_AGENT_ACCOUNT and _ready(p)}
    checks = []
    for group in groups:
        nodes = sorted(i["metadata"]["name"] for i in doc.get("items", [])
                       if i["metadata"].get("labels", {}).get(GROUP_LABEL) == group.name and _ready(i))
        if not nodes:
            checks.append(Check(group.name, "health agent", "group", "skip" if group.autoscaled else "fail", "no Ready node to prove it on"))
            continue
        missing = [n for n in nodes if n not in ready_on]
        checks.append(Check(group.name, "health agent", f"{len(nodes)} node(s)", "fail" if missing else "pass",
                            clip(f"no Ready {HEALTH_AGENT_ACCOUNT} pod on {', '.join(missing)}: HyperPod recovers no node it does not label")
                            if missing else f"a Ready {HEALTH_AGENT_ACCOUNT} pod on each"))
    return checks


# ------------------------------------------------------------------ what Kueue queues


def kueue_integrations(config_map: dict) -> tuple[set[str], set[str]]:
    """(frameworks, externalFrameworks) of Kueue's configuration in its ConfigMap."""
    import yaml

    text = (config_map.get("data") or {}).get(KUEUE_CONFIG_KEY)
    if text is None:
        raise AcceptError(f"{KUEUE_NAMESPACE}/{KUEUE_CONFIG_MAP} has no {KUEUE_CONFIG_KEY}")
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise AcceptError(f"{KUEUE_NAMESPACE}/{KUEUE_CONFIG_MAP}: {KUEUE_CONFIG_KEY} is not YAML: {str(err).splitlines()[0]}") from None
    integrations = config.get("integrations")
    if integrations is None:
        return set(KUEUE_DEFAULT_FRAMEWORKS), set()
    return set(integrations.get("frameworks") or ()), set(integrations.get("externalFrameworks") or ())


def _external(entry: str) -> tuple[str, str]:
    """(kind lower-cased, group) of an externalFrameworks entry, Kind.version.group."""
    kind, _, rest = entry.partition(".")
    return kind.lower(), rest.partition(".")[2]


def queue_checks(cluster) -> list[Check]:
    """Each job kind a team's Role lets its people create (manifests/tenancy.py QUEUED_KINDS)
    among the integrations of the cluster's Kueue, read live: a kind Kueue does not integrate
    is never queued, and a job of it runs outside every quota."""
    from manifests.tenancy import QUEUED_KINDS

    doc = cluster.kueue_config()
    if doc is RECORDED_NOTHING:
        return [Check(KUEUE_NAMESPACE, "kueue", k.integration, "skip", "not in the recording") for k in QUEUED_KINDS]
    if doc is None:
        return [Check(KUEUE_NAMESPACE, "kueue", k.integration, "fail", f"no ConfigMap {KUEUE_CONFIG_MAP}: is task governance installed?")
                for k in QUEUED_KINDS]
    frameworks, external = kueue_integrations(doc)
    out = []
    for kind in QUEUED_KINDS:
        if kind.external:
            # Kind.version.group: the SageMaker guide writes the training operator's kind
            # "HyperPodPytorchJob", its CRD "HyperPodPyTorchJob", so the kind is compared without case.
            found = [e for e in sorted(external) if _external(e) == _external(kind.integration)]
            where = "integrations.externalFrameworks"
        else:
            found = [kind.integration] if kind.integration in frameworks else []
            where = "integrations.frameworks"
        listed = ", ".join(sorted(external if kind.external else frameworks)) or "none"
        out.append(Check(KUEUE_NAMESPACE, "kueue", kind.integration, "pass" if found else "fail",
                         f"queued: {found[0]} in {where}" if found else
                         clip(f"{kind.resource} are not queued: Kueue's {where} has no {kind.integration} (it lists {listed}); "
                              "teams' jobs of this kind would run outside every quota")))
    return out


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
