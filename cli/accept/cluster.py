"""The cluster as `hyperpod-cdk accept` reads it: through the user's kubectl (Kubectl) or a recorded
run (Recording), the labels and limits it reads by, and the lines a run reports (Check, Report)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
# The inference operator's endpoints, by the resource's plural and group (the official model's
# apiVersion inference.sagemaker.aws.amazon.com/v1, kind InferenceEndpointConfig).
ENDPOINT_RESOURCE = "inferenceendpointconfigs.inference.sagemaker.aws.amazon.com"
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

    def _get(self, resource: str, name: str, namespace: str) -> dict | None:
        """`kubectl get -o json` of one object; None where the cluster has none of that name."""
        try:
            return json.loads(self._kubectl("get", resource, name, "-n", namespace, "-o", "json"))
        except AcceptError as err:
            if "NotFound" in str(err) or "not found" in str(err):
                return None
            raise

    def kueue_config(self) -> dict | None:
        """Kueue's ConfigMap as the cluster serves it (`kubectl get -o json`); None where there is none."""
        return self._get("configmap", KUEUE_CONFIG_MAP, KUEUE_NAMESPACE)

    def endpoint(self, namespace: str, name: str) -> dict | None:
        """The InferenceEndpointConfig `name` as the cluster serves it; None where there is none."""
        return self._get(ENDPOINT_RESOURCE, name, namespace)

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

    def endpoint(self, namespace: str, name: str) -> dict | None:
        """endpoints/<namespace>/<name>.json (`kubectl get inferenceendpointconfig NAME -n NS -o json`),
        `null` there where it was not applied; RECORDED_NOTHING where not recorded."""
        path = self.folder / "endpoints" / namespace / f"{name}.json"
        return json.loads(path.read_text()) if path.is_file() else RECORDED_NOTHING

    def invocation(self, endpoint_name: str) -> str | None:
        """invocations/<endpoint>.json: the body InvokeEndpoint answered; None where not recorded."""
        path = self.folder / "invocations" / f"{endpoint_name}.json"
        return path.read_text() if path.is_file() else None

    def cluster_nodes(self) -> dict | None:
        path = self.folder / "list-cluster-nodes.json"
        return json.loads(path.read_text()) if path.is_file() else None


def to_yaml(objects: list[dict]) -> str:
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", []))
