"""The acceptance run's Kubernetes objects, from the settings and the nodes found.

Plain data, no CDK: `hyperpod-cdk accept` applies them with kubectl and `accept --render`
prints them. Per GPU group: one NCCL `all_reduce_perf` MPIJob with a worker on every node,
over EFA (the awsome NCCL test's MPIJob, micro-benchmarks/nccl-tests/kubernetes/, is the
reference: its image, mpirun and all_reduce_perf arguments), and one Job per node running
DCGM's level-2 diagnostics. GPU and EFA counts come from the instance catalogue, as the
sample job's do; pods are pinned by hostname to the nodes under test.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from infra import catalogue
from infra.config import Settings

NAMESPACE = "hyperpod-acceptance"
LABELS = {"app.kubernetes.io/part-of": "hyperpod-cdk", "app.kubernetes.io/component": "acceptance"}
# Every pod of one check carries this label with the check's name, for `kubectl logs -l`.
RUN_LABEL = "hyperpod-cdk/acceptance-run"
# The pod whose log holds a check's result (the MPIJob's launcher; a Job has only one pod).
ROLE_LABEL = "hyperpod-cdk/acceptance-role"
HOSTNAME_LABEL = "kubernetes.io/hostname"
MPIJOB_API = "kubeflow.org/v2beta1"  # the MPI operator the HyperPod dependencies chart installs
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"  # where the awsome image installs Open MPI and the tests
ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
# all_reduce_perf's sweep as the awsome manifest runs it: 8 B doubling up to -e, 100 iterations,
# results checked (-c 1); -e is the published run's largest message where there is one.
DEFAULT_MESSAGE_BYTES = 16 * 1024**3
ITERATIONS = 100
DCGM_LEVEL = 2
# How long each check may run before the cluster stops it (activeDeadlineSeconds); the CLI
# waits as long. DCGM level 2 takes 2.5 to 10.5 minutes by GPU count, and the awsome health
# check gives it 900 s (4.validation_and_observability/2.gpu-cluster-healthcheck, check 1);
# the image pull comes on top. The NCCL sweep to 16 GiB takes minutes on p5; its multi-GB
# image pull on fresh nodes can take longer.
DCGM_DEADLINE_S = 900 + 600
NCCL_DEADLINE_S = 1800
# Kubernetes object names are DNS labels of at most 63 characters; the MPI operator appends
# "-launcher" and "-worker-<n>" to an MPIJob's name, the Job controller five characters.
NAME_MAX = 47


def name(*parts: str) -> str:
    """A DNS-label name from parts (node names included), shortened with a hash past NAME_MAX."""
    text = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(text) <= NAME_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:NAME_MAX - 9].rstrip('-')}-{digest}"


def namespace() -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": dict(LABELS)}}


def message_bytes(instance_type: str) -> int:
    """The sweep's largest message: the published run's, so the figures compare like for like."""
    published = catalogue.NCCL_ALL_REDUCE_BUSBW.get(instance_type)
    return published.message_bytes if published else DEFAULT_MESSAGE_BYTES


def _pinned(nodes: Sequence[str]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": list(nodes)}]}]}}}


def _tolerations(group) -> list[dict]:
    return [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in group.taints]


def _pod(containers: list[dict], *, run: str, nodes: Sequence[str], group, extra: dict | None = None) -> dict:
    spec = {"affinity": _pinned(nodes), "containers": containers, **(extra or {})}
    tolerations = _tolerations(group)
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"labels": {**LABELS, RUN_LABEL: run}}, "spec": spec}


def _mpirun(group, nodes: int) -> list[str]:
    spec = group.spec
    efa = spec.efa_interfaces > 0
    env = [
        *(["FI_PROVIDER=efa", "FI_EFA_FORK_SAFE=1"] if efa else []),
        # RDMA read where the type has it (the catalogue); libfabric aborts with it elsewhere.
        *(["FI_EFA_USE_DEVICE_RDMA=1"] if efa and spec.efa_rdma_read else []),
        # The plugin's choice of provider and transport lands in the log beside the figures.
        "NCCL_DEBUG=INFO",
    ]
    return [
        MPIRUN, "--allow-run-as-root", "--tag-output",
        "-np", str(nodes * spec.accelerators), "-N", str(spec.accelerators), "--bind-to", "none",
        # The image's own PATH and LD_LIBRARY_PATH (its Dockerfile's ENV: Open MPI, EFA, the
        # OFI plugin, NCCL) go to every rank.
        "-x", "PATH", "-x", "LD_LIBRARY_PATH", *[a for e in env for a in ("-x", e)],
        ALL_REDUCE_PERF, "-b", "8", "-e", str(message_bytes(group.instance_type)), "-f", "2", "-g", "1",
        "-c", "1", "-n", str(ITERATIONS),
    ]


def nccl_job(settings: Settings, group, nodes: Sequence[str], *, run: str | None = None) -> dict:
    """An MPIJob whose workers hold every GPU and EFA interface of each node in `nodes`, and
    whose launcher runs all_reduce_perf across all of them. A worker asks for all of a node's
    GPUs, so no two share a node: as many workers as nodes, pinned to them, is one on each."""
    run = run or name("nccl", group.name)
    image = settings.acceptance.nccl_image
    resources = dict(group.device_resources)
    resources["memory"] = "32Gi"
    worker = _pod(
        [{
            "name": "worker",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
        }],
        run=run, nodes=nodes, group=group,
        # NCCL's intra-node transport needs far more shared memory than the 64 MiB default.
        extra={"volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]},
    )
    launcher = _pod(
        [{
            "name": "launcher",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": _mpirun(group, len(nodes)),
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        }],
        run=run, nodes=nodes, group=group,
    )
    launcher["metadata"]["labels"][ROLE_LABEL] = "result"
    return {
        "apiVersion": MPIJOB_API,
        "kind": "MPIJob",
        "metadata": {"name": run, "namespace": NAMESPACE, "labels": {**LABELS, RUN_LABEL: run}},
        "spec": {
            "slotsPerWorker": group.spec.accelerators,
            # A failed run is a result to read, not something to retry.
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0, "activeDeadlineSeconds": NCCL_DEADLINE_S},
            # mpirun starts once every worker runs, not before (when it would find no one to reach).
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                "Worker": {"replicas": len(nodes), "template": worker},
            },
        },
    }


def dcgm_job(settings: Settings, group, node: str) -> dict:
    """A Job on `node` holding all its GPUs, running DCGM's level-2 diagnostics once. The
    pod starts its own host engine in its own network namespace (nv-hostengine daemonizes onto
    127.0.0.1:5555), so one the node already runs is not disturbed; it runs as the image's root
    user because "portions of diagnostics can require root" (NVIDIA's nv-hostengine reference)."""
    run = name("dcgm", node)
    gpus = {group.spec.accelerator_resource: group.spec.accelerators}
    pod = _pod(
        [{
            "name": "dcgm",
            "image": settings.acceptance.dcgm_image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", f"nv-hostengine && dcgmi diag -r {DCGM_LEVEL}"],
            "resources": {"requests": dict(gpus), "limits": dict(gpus)},
        }],
        run=run, nodes=[node], group=group, extra={"restartPolicy": "Never"},
    )
    pod["metadata"]["labels"][ROLE_LABEL] = "result"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": run, "namespace": NAMESPACE, "labels": {**LABELS, RUN_LABEL: run}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": DCGM_DEADLINE_S, "ttlSecondsAfterFinished": 3600, "template": pod},
    }


def objects(settings: Settings, nodes_by_group: dict[str, Sequence[str]]) -> list[dict]:
    """Everything one acceptance run applies, in the order it applies them: the namespace, a
    diagnostics Job on each node, then per group the fabric test across its nodes (each holds
    all of a node's GPUs, so the run waits for the diagnostics before the fabric starts)."""
    groups = {name: settings.instance_group(name) for name in nodes_by_group}
    out = [namespace()]
    out += [dcgm_job(settings, groups[name], node) for name, nodes in nodes_by_group.items() for node in nodes]
    out += [nccl_job(settings, groups[name], nodes) for name, nodes in nodes_by_group.items() if len(nodes) >= 2]
    return out


# ------------------------------------------------------------------ tenancy (team namespaces)

# What only a cluster can answer about tenancy: from a team's namespace the instance metadata
# service is out of reach (on_create.sh's rule), another namespace cannot connect to the
# team's pods while the team's own can (its default deny, manifests/tenancy.py, enforced by the
# VPC CNI's network policy agent on nodes with its kernel and BPF prerequisites), and a
# privileged pod is refused (its Pod Security level). Every probe passes restricted itself.
# A policy drops packets, so a blocked connection is a timeout: a refused connection or a name
# that does not resolve proves nothing (the listener is not there), and counts as a failure.
PROBE_PORT = 8080
PROBE_DEADLINE_S = 300
# Written by the probes as their last line, read by `accept`: a timeout (BLOCKED), an answer
# (REACHED from the metadata service, CONNECTED from the listener), anything else (FAILED, after
# the error's own line).
BLOCKED, REACHED, CONNECTED, FAILED = "BLOCKED", "REACHED", "CONNECTED", "FAILED"
IMDS_URL = "http://169.254.169.254/latest/meta-data/"
# busybox wget's -T bounds the connection as well as each read; a dropped SYN ends in its
# "download timed out".
WGET_TIMEOUT_S = 5
# The blocked side tries this often; each try must time out.
BLOCKED_TRIES = 3
# The listener's own namespace tries for up to this many seconds (the listener may be starting).
LISTENER_WAIT_S = 120
_RESTRICTED = {
    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
}
_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}}


def _probe(settings: Settings, name: str, namespace: str, script: str, *, labels: dict | None = None, pod: dict | None = None) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {**LABELS, RUN_LABEL: name}},
        "spec": {
            "backoffLimit": 0, "activeDeadlineSeconds": PROBE_DEADLINE_S, "ttlSecondsAfterFinished": 600,
            "template": {
                "metadata": {"labels": {**LABELS, RUN_LABEL: name, ROLE_LABEL: "result", **(labels or {})}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": _POD_SECURITY,
                    "containers": [{
                        "name": "probe", "image": settings.acceptance.probe_image, "command": ["/bin/sh", "-c", script],
                        "securityContext": _RESTRICTED,
                        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
                    }],
                    **(pod or {}),
                },
            },
        },
    }


def _try(url: str) -> str:
    """Shell: one GET of `url`; sets $verdict to CONNECTED, BLOCKED (timed out) or FAILED and
    $out to wget's own words."""
    return (f"out=$(wget -T {WGET_TIMEOUT_S} -q -O /dev/null {url} 2>&1) && verdict={CONNECTED} || "
            f"case \"$out\" in *'timed out'*) verdict={BLOCKED};; *) verdict={FAILED};; esac")


def _connect_script(url: str) -> str:
    """From the listener's own namespace: try until it answers (it may still be starting)."""
    return (f"end=$(( $(date +%s) + {LISTENER_WAIT_S} )); while :; do {_try(url)}; "
            f"if [ $verdict = {CONNECTED} ] || [ $(date +%s) -ge $end ]; then break; fi; sleep 2; done; "
            f"[ $verdict = {CONNECTED} ] || echo \"$out\"; echo $verdict")


def _blocked_script(url: str) -> str:
    """From another namespace: every try must time out; the first answer or other error ends it."""
    return (f"for i in $(seq {BLOCKED_TRIES}); do {_try(url)}; [ $verdict = {BLOCKED} ] || break; done; "
            f"[ $verdict = {FAILED} ] && echo \"$out\"; echo $verdict")


def _imds_script() -> str:
    """Anything but a timeout reached the service (IMDSv2 answers a tokenless GET with 401)."""
    return f"{_try(IMDS_URL)}; if [ $verdict = {BLOCKED} ]; then echo $verdict; else echo \"$out\"; echo {REACHED}; fi"


def tenancy_objects(settings: Settings, team: str) -> dict[str, dict]:
    """Per check, the objects of one team's tenancy probes: a listener and its Service in the
    team's namespace, a client there, then clients in the acceptance namespace and in another
    team's namespace (where there is another team), the metadata probe, and the privileged pod
    to be refused (created only as a server-side dry run). `accept` applies the outside clients
    only once the one in the team's namespace has connected."""
    from infra import naming

    ns = naming.team_names(team).namespace
    listener = name("tenancy-listener", team)
    url = f"http://{listener}.{ns}.svc:{PROBE_PORT}/"
    serve = _probe(settings, listener, ns, f"mkdir -p /tmp/www && echo ok > /tmp/www/index.html && httpd -f -p {PROBE_PORT} -h /tmp/www",
                   labels={"hyperpod-cdk/probe": listener})
    serve["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    serve["spec"]["template"]["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}]
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": listener, "namespace": ns, "labels": dict(LABELS)},
        "spec": {"selector": {"hyperpod-cdk/probe": listener}, "ports": [{"port": PROBE_PORT, "targetPort": PROBE_PORT}]},
    }
    privileged = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name("tenancy-privileged", team), "namespace": ns, "labels": dict(LABELS)},
        "spec": {"containers": [{"name": "probe", "image": settings.acceptance.probe_image, "securityContext": {"privileged": True}}]},
    }
    out = {
        "listener": serve, "service": service, "privileged": privileged,
        "imds": _probe(settings, name("tenancy-imds", team), ns, _imds_script()),
        "same namespace": _probe(settings, name("tenancy-same", team), ns, _connect_script(url)),
        "other namespace": _probe(settings, name("tenancy-other", team), NAMESPACE, _blocked_script(url)),
    }
    other = next((t.name for t in settings.governance.teams if t.name != team), None)
    if other is not None:
        out["other team"] = _probe(settings, name("tenancy-from", other, "to", team), naming.team_names(other).namespace,
                                   _blocked_script(url))
    return out


def guard_probe(settings: Settings, group, node: str) -> dict:
    """A pod on the pod network of `node` that tries the instance metadata service: the node's
    guard (on_create.sh's rule) makes it time out. Pinned by hostname, it tolerates every taint
    so that no group's nodes are left out."""
    return _probe(settings, name("imds-guard", node), NAMESPACE, _imds_script(),
                  pod={"affinity": _pinned([node]), "tolerations": [{"operator": "Exists"}]})
