"""What `hyperpod-cdk accept` reads of the software the cluster runs (cli/accept/software.py): the
agents behind the node guard, HyperPod's health agent on every GPU node, and Kueue's integrations,
on the recorded prod run (tests/fixtures/acceptance) and kubectl driven as accept drives it."""

from __future__ import annotations

import json
import shutil
import subprocess

from cli import accept
from cli.accept import software
from tests.cli.test_accept import KUEUE_QUEUES_ALL, RECORDING, _prod, kueue_config_map


def test_the_agents_behind_the_guard_run_ready_with_no_instance_metadata_errors(tmp_path):
    report = accept.run(_prod(), accept.Recording(RECORDING))
    agents = {c.subject: c for c in report.checks if c.check == "agents"}
    assert {k: c.status for k, c in agents.items()} == {"HyperPod agents": "pass", "training operator": "pass", "observability collectors": "pass"}
    # The operator's controller is found by its Pod Identity service account (the one AWS's docs
    # associate the add-on's role with), not by a name no source gives.
    from addons import training_operator

    assert ("training operator", "aws-hyperpod", training_operator.SERVICE_ACCOUNT) in software.agents(_prod())
    # A controller that logs an SDK's metadata failure, and one that is not Ready, fail.
    import json
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(RECORDING, folder)
    operator = "hp-training-operator-controller-manager-7d9f8b6c5-x2k4p"
    sdk_says = ('failed to refresh cached credentials, no EC2 IMDS role found, operation error ec2imds: GetMetadata, '
                'request canceled, context deadline exceeded')
    (folder / "pod-logs" / "aws-hyperpod" / f"{operator}.log").write_text(f"starting\n{sdk_says}\n")
    doc = json.loads((folder / "pods" / "hyperpod-observability.json").read_text())
    doc["items"][0]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    (folder / "pods" / "hyperpod-observability.json").write_text(json.dumps(doc))
    agents = {c.subject: c for c in accept.run(_prod(), accept.Recording(folder)).checks if c.check == "agents"}
    assert agents["training operator"].status == "fail" and "no EC2 IMDS role found" in agents["training operator"].detail
    assert agents["observability collectors"].detail == "hyperpod-observability-collector-5c7b9d-qp2lm not Ready"
    # No controller pod at all: its add-on is installed and nothing runs it.
    doc = json.loads((folder / "pods" / "aws-hyperpod.json").read_text())
    doc["items"] = [p for p in doc["items"] if p["spec"]["serviceAccountName"] != training_operator.SERVICE_ACCOUNT]
    (folder / "pods" / "aws-hyperpod.json").write_text(json.dumps(doc))
    agents = {c.subject: c for c in accept.run(_prod(), accept.Recording(folder)).checks if c.check == "agents"}
    assert agents["training operator"].detail == f"no pod runs as {training_operator.SERVICE_ACCOUNT}"


def test_the_metadata_error_words_are_the_sdks_own():
    # botocore, as installed: its IMDS fetcher's retries-exhausted line and its IMDSv2 token error.
    import inspect

    from botocore import utils

    source = inspect.getsource(utils)
    for words in accept.IMDS_ERRORS[:2]:
        assert words in source, words


# Kueue's configuration (kubernetes-sigs/kueue config/components/manager/controller_manager_config.yaml's
# integrations block), listing what teams create: Kueue's own framework names for Jobs and
# PyTorchJobs, and the entry the SageMaker guide ("Installing the training operator", Kueue)
# adds for the training operator's jobs.
def _kueue_checks(tmp_path, text: str | None) -> dict:
    import json
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(RECORDING, folder)
    if text is not None:
        (folder / "kueue-manager-config.json").write_text(json.dumps(kueue_config_map(text)))
    return {c.subject: c for c in accept.run(_prod(), accept.Recording(folder)).checks if c.check == "kueue"}


def test_accept_fails_naming_each_job_kind_teams_create_that_kueue_does_not_queue(tmp_path):
    from manifests.tenancy import QUEUED_KINDS

    assert {k: c.status for k, c in _kueue_checks(tmp_path, KUEUE_QUEUES_ALL).items()} == {k.integration: "pass" for k in QUEUED_KINDS}
    # Task governance's Kueue without the pytorchjob integration: PyTorchJobs are never queued.
    only_jobs = KUEUE_QUEUES_ALL.replace('  - "kubeflow.org/pytorchjob"\n', "")
    checks = _kueue_checks(tmp_path / "a", only_jobs)
    assert checks["kubeflow.org/pytorchjob"].status == "fail"
    assert checks["kubeflow.org/pytorchjob"].detail.startswith("pytorchjobs are not queued: Kueue's integrations.frameworks has no kubeflow.org/pytorchjob")
    assert checks["batch/job"].status == "pass"
    # No integrations block at all: Kueue's default, batch/job alone.
    checks = _kueue_checks(tmp_path / "b", "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n")
    assert {k: c.status for k, c in checks.items()} == {"batch/job": "pass", "kubeflow.org/pytorchjob": "fail",
                                                        "HyperPodPytorchJob.v1.sagemaker.amazonaws.com": "fail"}
    assert "hyperpodpytorchjobs are not queued: Kueue's integrations.externalFrameworks" in checks["HyperPodPytorchJob.v1.sagemaker.amazonaws.com"].detail
    # A recording without Kueue's configuration proves nothing either way.
    assert {c.status for c in _kueue_checks(tmp_path / "c", None).values()} == {"skip"}


def test_kubectl_reads_kueues_configuration_live_and_a_cluster_without_it_fails():
    import json
    import subprocess

    calls = []

    def run(args, **kw):
        calls.append(args)
        if "configmap" in args:
            return subprocess.CompletedProcess(args, 1, "", 'Error from server (NotFound): configmaps "kueue-manager-config" not found\n')
        return subprocess.CompletedProcess(args, 0, json.dumps({"items": []}), "")

    cluster = accept.Kubectl(run=run)
    assert cluster.kueue_config() is None
    assert calls[-1] == ["kubectl", "get", "configmap", "kueue-manager-config", "-n", "kueue-system", "-o", "json"]
    assert {c.status for c in software.queue_checks(cluster)} == {"fail"}


def test_a_gpu_node_without_a_ready_health_agent_is_named(tmp_path):
    # The agent writes the node-health labels HyperPod's automatic node recovery acts on.
    import json
    import shutil

    report = accept.run(_prod(), accept.Recording(RECORDING))
    (agent,) = [c for c in report.checks if c.check == "health agent"]
    assert (agent.group, agent.status) == ("gpu", "pass")
    folder = tmp_path / "run"
    shutil.copytree(RECORDING, folder)
    doc = json.loads((folder / "pods" / "aws-hyperpod.json").read_text())
    doc["items"] = [p for p in doc["items"] if p["spec"].get("nodeName") != "hyperpod-i-0a1b2c3d4e5f60702"
                    or p["spec"]["serviceAccountName"] != software.HEALTH_AGENT_ACCOUNT]
    (folder / "pods" / "aws-hyperpod.json").write_text(json.dumps(doc))
    (agent,) = [c for c in accept.run(_prod(), accept.Recording(folder)).checks if c.check == "health agent"]
    assert agent.status == "fail" and "hyperpod-i-0a1b2c3d4e5f60702" in agent.detail and "hyperpod-i-0a1b2c3d4e5f60701" not in agent.detail
