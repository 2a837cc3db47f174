"""What `hyperpod-cdk accept` reads of the software the cluster runs, beside its GPU and tenancy
runs (cli/accept/__init__.py): each agent on the pod network Ready and free of instance-metadata errors,
HyperPod's health-monitoring agent on every GPU node, and the job kinds Kueue integrates."""

from __future__ import annotations

from cli.accept.cluster import (AGENT_LOG_SINCE, GROUP_LABEL, IMDS_ERRORS, KUEUE_CONFIG_KEY, KUEUE_CONFIG_MAP,
                                KUEUE_DEFAULT_FRAMEWORKS, KUEUE_NAMESPACE, RECORDED_NOTHING, AcceptError, Check, _ready)
from cli.diagnostics import clip
from infra import catalogue
from infra.config import Settings

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
