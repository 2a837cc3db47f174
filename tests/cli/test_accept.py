"""`hyperpod-cdk accept`: the NCCL and DCGM outputs it reads are real recorded outputs (their
sources in tests/fixtures/acceptance/SOURCE.md; how it reads and judges them:
test_diagnostics.py), the deep health check goes through botocore's Stubber against
SageMaker's own model, and the cluster side is a recorded run or a fake kubectl."""

from __future__ import annotations

import datetime as dt
import json
import re
import stat

import boto3
import pytest
from botocore.stub import Stubber

from cli import accept
from cli import main as cli
from infra import config, validation
from manifests import acceptance as m
from tests.cli.test_diagnostics import DCGM_PASS, P5, slowed
from tests.conftest import CONTEXT, ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "acceptance"
RECORDING = FIXTURES / "prod-two-nodes"


def _prod():
    return validation.load_settings(CONTEXT, "prod")[0]


# ------------------------------------------------------------------ whole runs


def test_the_recorded_prod_run_names_the_failing_node_and_the_missing_ones():
    report = accept.run(_prod(), accept.Recording(RECORDING))
    by = {(c.check, c.subject): c for c in report.checks}
    assert by[("nodes", "2/4")].status == "fail" and "2 missing" in by[("nodes", "2/4")].detail
    assert by[("nccl", "fabric (2 nodes)")].status == "pass"
    assert by[("dcgm", "hyperpod-i-0a1b2c3d4e5f60701")].status == "pass"
    assert by[("dcgm", "hyperpod-i-0a1b2c3d4e5f60702")].detail.startswith("GPU Memory: Fail - All")
    assert not report.passed and report.failing_nodes == ["hyperpod-i-0a1b2c3d4e5f60702"]


def test_a_recorded_deep_health_check_is_read_from_list_cluster_nodes(tmp_path):
    import shutil

    shutil.copytree(RECORDING, tmp_path / "run")
    now = "2026-12-01T10:00:00+00:00"
    (tmp_path / "run" / "list-cluster-nodes.json").write_text(json.dumps({"ClusterNodeSummaries": [
        {"InstanceGroupName": "system", "InstanceId": "i-0c1d2e3f4a5b60601", "InstanceType": "ml.m5.8xlarge",
         "LaunchTime": now, "InstanceStatus": {"Status": "Running"}},
        {"InstanceGroupName": "gpu", "InstanceId": "i-0a1b2c3d4e5f60702", "InstanceType": "ml.p5.48xlarge",
         "LaunchTime": now, "InstanceStatus": {"Status": "Failure", "Message": "made for this test"}}]}))
    report = accept.run(_prod(), accept.Recording(tmp_path / "run"))
    (check,) = [c for c in report.checks if c.check == "deep health check"]
    assert (check.subject, check.status, check.detail) == ("hyperpod-i-0a1b2c3d4e5f60702", "fail", "Failure: made for this test")


def test_a_config_without_a_gpu_group_or_a_team_has_nothing_to_prove():
    settings = validation.load_settings(CONTEXT, "dev")[0]
    cpu_only = settings.hyperpod.model_copy(update={"instance_groups": (settings.instance_group("system"),)})
    no_teams = settings.governance.model_copy(update={"teams": ()})
    patched = settings.model_copy(update={"hyperpod": cpu_only, "governance": no_teams})
    with pytest.raises(accept.AcceptError, match="dev has nothing to prove: no group of whole NVIDIA GPUs"):
        accept.run(patched, accept.Recording(RECORDING))


class FakeCluster:
    """A cluster whose checks finish at once, with a log per check name (the slow node's pairs
    and fabric get the slowed output), recording what was applied and deleted."""

    def __init__(self, nodes: list[str], slow: str | None, finishes: bool = True):
        self.doc = {"items": [{"metadata": {"name": n, "labels": {accept.GROUP_LABEL: "gpu", accept.HEALTH_LABEL: "Schedulable"}},
                               "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for n in nodes]}
        self.slow, self.finishes = slow, finishes
        self.applied, self.deleted, self.logs = [], [], {}

    def nodes(self):
        return self.doc

    def apply(self, objects):
        self.applied += objects
        for obj in objects:
            if obj["kind"] == "MPIJob":
                hosts = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
                self.logs[obj["metadata"]["name"]] = slowed(P5, 0.5) if self.slow in hosts else P5
            elif obj["kind"] == "Job":
                # The tenancy probes' verdicts where the team namespaces are tenants.
                verdicts = {"tenancy-imds": m.BLOCKED, "tenancy-same": m.CONNECTED, "tenancy-other": m.BLOCKED,
                            "tenancy-from": m.BLOCKED, "imds-guard": m.BLOCKED}
                name = obj["metadata"]["name"]
                self.logs[name] = next((v for k, v in verdicts.items() if name.startswith(k)), DCGM_PASS)

    def delete(self, objects):
        self.deleted += objects

    def finished(self, obj):
        return self.finishes

    def result_log(self, run, namespace=m.NAMESPACE):
        return self.logs.get(run, "")

    def pods(self, namespace):
        return None  # the agents' checks are the recorded run's

    def kueue_config(self):
        return kueue_config_map(KUEUE_QUEUES_ALL)

    def refusal(self, obj):
        return 'pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged'


def _four_node_prod():
    return _prod()  # prod's gpu group: four ml.p5.48xlarge


def test_a_short_fabric_is_rerun_in_pairs_and_the_weak_node_named():
    nodes = [f"hyperpod-i-0a1b2c3d4e5f6070{i}" for i in range(1, 5)]
    cluster = FakeCluster(nodes, slow=nodes[2])
    report = accept.run(_four_node_prod(), cluster, deep_health_check=False)
    fabric = next(c for c in report.checks if c.check == "nccl")
    assert fabric.status == "fail" and fabric.subject == "fabric (4 nodes)"
    assert [c.subject for c in report.checks if c.check == "nccl pairs"] == [nodes[2]]
    assert report.failing_nodes == [nodes[2]]
    kinds = [o["kind"] for o in cluster.applied]
    # Diagnostics first: a DCGM Job and an NCCL worker each hold all of a node's GPUs.
    assert kinds[:6] == ["Namespace"] + ["Job"] * 4 + ["MPIJob"]
    pair_jobs = [o for o in cluster.applied if o["kind"] == "MPIJob"][1:]
    assert len(pair_jobs) == 4 and all(o["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2 for o in pair_jobs)
    assert {o["metadata"]["name"] for o in cluster.deleted} >= {o["metadata"]["name"] for o in cluster.applied[1:]}


def test_checks_that_never_finish_fail_after_their_deadline_and_no_sooner():
    nodes = [f"hyperpod-i-0a1b2c3d4e5f6070{i}" for i in range(1, 5)]
    now = [0.0]
    report = accept.run(_four_node_prod(), FakeCluster(nodes, slow=None, finishes=False), deep_health_check=False,
                        sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    # The run waits out the longest check's activeDeadlineSeconds (the cluster stops it then).
    assert now[0] >= max(m.NCCL_DEADLINE_S, m.DCGM_DEADLINE_S)
    timed_out = [c for c in report.checks if "did not finish" in c.detail]
    # The fabric, each node's diagnostics and metadata guard, and each team's two probes inside its
    # namespace; the probes from outside never start, as the listener never answered inside.
    assert len(timed_out) == 1 + 2 * len(nodes) + 2 * 2
    assert [c.detail for c in report.checks if c.subject.startswith("from hyperpod-")] == [
        "not run: the listener never answered from its own namespace, so a blocked connection would prove nothing"] * 4


# ------------------------------------------------------------------ deep health check


def _sagemaker():
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def test_the_deep_health_check_starts_waits_and_names_nodes_not_running_after_it():
    settings = _prod()
    client, stub = _sagemaker()
    stub.add_response("start_cluster_health_check", {"ClusterArn": "arn:aws:sagemaker:us-east-1:111111111111:cluster/abcdefghijkl"},
                      {"ClusterName": settings.hyperpod_cluster_name, "DeepHealthCheckConfigurations": [
                          {"InstanceGroupName": "gpu", "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity"]}]})
    now = dt.datetime.now(dt.timezone.utc)
    op = {"OperationId": "0a1b2c3d-0000-4000-8000-000000000001", "ClusterArn": "arn:aws:sagemaker:us-east-1:111111111111:cluster/abcdefghijkl",
          "Type": "DeepHealthCheck", "CreationTime": now}
    listing = {"ClusterName": settings.hyperpod_cluster_name, "Type": "DeepHealthCheck", "SortBy": "CreationTime",
               "SortOrder": "Descending", "MaxResults": 10}
    stub.add_response("list_cluster_operations", {"ClusterOperationSummaries": [{**op, "Status": "InProgress"}]}, listing)
    stub.add_response("list_cluster_operations", {"ClusterOperationSummaries": [{**op, "Status": "Done"}]}, listing)
    node = lambda iid, status, **more: {"InstanceGroupName": "gpu", "InstanceId": iid, "InstanceType": "ml.p5.48xlarge",  # noqa: E731
                                        "LaunchTime": now, "InstanceStatus": {"Status": status, **more}}
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [node("i-0a1b2c3d4e5f60701", "Running")], "NextToken": "t"},
                      {"ClusterName": settings.hyperpod_cluster_name})
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [
        node("i-0a1b2c3d4e5f60702", "Pending", Message="Replacing the instance after a failed deep health check")]},
        {"ClusterName": settings.hyperpod_cluster_name, "NextToken": "t"})
    stub.activate()
    slept = []
    checks = accept.deep_health_checks(settings, [settings.instance_group("gpu")], FakeCluster([], None), client,
                                       sleep=slept.append, clock=lambda: 0.0)
    stub.assert_no_pending_responses()
    assert slept == [accept.DEEP_HEALTH_CHECK_POLL_S]
    assert [(c.subject, c.status) for c in checks] == [("hyperpod-i-0a1b2c3d4e5f60701", "pass"), ("hyperpod-i-0a1b2c3d4e5f60702", "fail")]
    assert checks[1].detail == "Pending: Replacing the instance after a failed deep health check"


def test_the_deep_health_check_wait_covers_what_hyperpod_documents_for_p5():
    # HyperPod's deep health checks take 60 to 90 minutes on p5 (FACTS: the deep health check docs).
    assert accept.DEEP_HEALTH_CHECK_WAIT_S >= 90 * 60


def test_types_without_deep_health_checks_are_skipped_without_an_api_call():
    settings = validation.load_settings(CONTEXT, "dev")[0]  # gpu: ml.g5.8xlarge
    client, stub = _sagemaker()
    stub.activate()  # any call would fail: nothing is queued
    checks = accept.deep_health_checks(settings, [settings.instance_group("gpu")], FakeCluster([], None), client,
                                       sleep=None, clock=None)
    assert [(c.status, c.detail) for c in checks] == [("skip", "ml.g5.8xlarge has no deep health checks")]


def test_the_sagemaker_model_offers_the_on_demand_deep_health_check():
    # botocore's SageMaker model: StartClusterHealthCheck and the check types it takes.
    model = boto3.client("sagemaker", region_name="us-east-1").meta.service_model
    checks = model.shape_for("DeepHealthCheckType").enum
    assert {"InstanceStress", "InstanceConnectivity"} <= set(checks)
    assert "StartClusterHealthCheck" in model.operation_names


# ------------------------------------------------------------------ kubectl and errors


def test_kubectl_is_driven_with_yaml_on_stdin_and_its_failure_is_one_line():
    calls = []

    class Done:
        returncode, stdout, stderr = 0, "", ""

    class Refused:
        returncode, stdout = 1, ""
        stderr = "E1204 11:00:00 memcache.go:265] couldn't get current server API group list\nerror: You must be logged in to the server (Unauthorized)"

    kubectl = accept.Kubectl(run=lambda argv, **kw: calls.append((argv, kw)) or Done())
    kubectl.apply([m.namespace()])
    argv, kw = calls[0]
    assert argv == ["kubectl", "apply", "-f", "-"] and "kind: Namespace" in kw["input"]
    refused = accept.Kubectl(run=lambda argv, **kw: Refused())
    with pytest.raises(accept.AcceptError, match=r"^kubectl get failed: .*Unauthorized\)$"):
        refused.nodes()


@pytest.mark.parametrize("kind, conditions, done", [
    ("Job", [{"type": "Complete", "status": "True"}], True),
    ("Job", [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}], True),
    ("MPIJob", [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}], False),
    ("MPIJob", [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}], True),
])
def test_a_check_has_finished_when_its_controller_says_it_succeeded_or_failed(kind, conditions, done):
    # Job conditions Complete/Failed (batch/v1); MPIJob Succeeded/Failed (the MPI operator's v2beta1 status).
    seen = []

    class Out:
        returncode, stderr = 0, ""
        stdout = json.dumps({"status": {"conditions": conditions}})

    kubectl = accept.Kubectl(run=lambda argv, **kw: seen.append(argv) or Out())
    assert kubectl.finished({"kind": kind, "metadata": {"name": "dcgm-x"}}) is done
    assert seen[0][:3] == ["kubectl", "get", "mpijobs.kubeflow.org" if kind == "MPIJob" else "jobs"]


def _path_with(tmp_path, kubectl: str | None):
    folder = tmp_path / "bin"
    folder.mkdir()
    if kubectl is not None:
        script = folder / "kubectl"
        script.write_text(kubectl)
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(folder)


NO_KUBECONFIG = "#!/bin/sh\necho 'error: couldn'\"'\"'t get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused' >&2\nexit 1\n"


@pytest.mark.parametrize(
    "argv, kubectl, says",
    [
        (["accept", "-c", "env=prod", "--no-deep-health-check"], None, "kubectl is not on PATH"),
        (["accept", "-c", "env=prod", "--no-deep-health-check"], NO_KUBECONFIG, "kubectl get failed: error: couldn't get current server API group list"),
        (["accept", "-c", "env=prod"], NO_KUBECONFIG, "no AWS credentials from the default credential chain"),
        (["accept", "-c", "env=prod", "--group", "system"], None, "--group system: not a group the acceptance run proves; groups: gpu"),
        (["accept", "-c", "env=prod", "--from", "/nonexistent"], None, "--from /nonexistent: no nodes.json"),
        (["dashboards", "-c", "env=prod"], None, "addons.observability.grafana.enabled is off in prod"),
    ],
    ids=["no kubectl", "no kubeconfig", "no credentials", "not a gpu group", "no recording", "no grafana"],
)
def test_accept_and_dashboards_fail_in_one_line(argv, kubectl, says, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", _path_with(tmp_path, kubectl))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1 and says in errors[0], err


@pytest.mark.parametrize("argv", [["accept", "--group"], ["accept", "--nope"], ["dashboards", "--format", "x"]])
def test_bad_accept_flags_are_argparse_usage_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].startswith("hyperpod-cdk")


def test_a_closed_network_refuses_public_images_before_touching_the_cluster(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", _path_with(tmp_path, None))
    from tests.conftest import CAPABILITIES, patched_context

    ctx = patched_context("dev", CAPABILITIES["closed-network"])
    (tmp_path / "cdk.json").write_text(json.dumps({"context": ctx}))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["accept", "-c", "env=dev"]) == 2
    assert "acceptance.nccl_image: public.ecr.aws/hpc-cloud/nccl-tests" in capsys.readouterr().err


# ------------------------------------------------------------------ tenancy


def test_the_recorded_run_proves_each_teams_namespace_is_a_tenant():
    report = accept.run(_prod(), accept.Recording(RECORDING))
    tenancy = {(c.group, c.subject): c for c in report.checks if c.check == "tenancy"}
    for ns in ("hyperpod-ns-ml-research", "hyperpod-ns-ml-production"):
        assert {s: c.status for (g, s), c in tenancy.items() if g == ns} == {
            "privileged pod": "pass", "instance metadata": "pass", "from its own namespace": "pass", "from hyperpod-acceptance": "pass",
            f"from {({'hyperpod-ns-ml-research', 'hyperpod-ns-ml-production'} - {ns}).pop()}": "pass"}
        assert 'violates PodSecurity "restricted:latest"' in tenancy[(ns, "privileged pod")].detail


def test_a_reachable_metadata_service_an_open_namespace_and_an_admitted_privileged_pod_fail(tmp_path):
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(RECORDING, folder)
    (folder / "logs" / "tenancy-imds-ml-research.log").write_text("wget: server returned error: HTTP/1.1 401 Unauthorized\nREACHED\n")
    (folder / "logs" / "tenancy-other-ml-research.log").write_text("CONNECTED\n")
    (folder / "dry-run" / "tenancy-privileged-ml-research.txt").unlink()
    report = accept.run(_prod(), accept.Recording(folder))
    failed = {c.subject: c.detail for c in report.checks if c.check == "tenancy" and c.group == "hyperpod-ns-ml-research" and c.status == "fail"}
    assert failed == {"instance metadata": "REACHED: wget: server returned error: HTTP/1.1 401 Unauthorized", "from hyperpod-acceptance": "CONNECTED",
                      "privileged pod": "admitted: the namespace enforces no Pod Security level"}


def test_the_tenancy_probes_pass_restricted_and_the_privileged_one_breaks_baseline():
    from tests.manifests import pod_security_standards as pss

    objects = m.tenancy_objects(_prod(), "ml-research")
    for key in ("listener", "imds", "same namespace", "other namespace"):
        assert pss.violations(pss.pod_of(objects[key]["spec"]["template"]), "restricted") == [], key
    assert any(v.startswith("baseline Privileged Containers") for v in pss.violations(objects["privileged"], "baseline"))
    # The other-namespace client is outside every team namespace; the rest are in the team's.
    assert objects["other namespace"]["metadata"]["namespace"] == m.NAMESPACE
    assert {objects[k]["metadata"]["namespace"] for k in ("listener", "imds", "same namespace", "service")} == {"hyperpod-ns-ml-research"}


def test_kubectl_asks_the_server_for_a_dry_run_of_the_privileged_pod():
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        err = 'Error from server (Forbidden): error when creating "STDIN": pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged'
        return type("R", (), {"returncode": 1, "stdout": "", "stderr": err})()

    refusal = accept.Kubectl(run).refusal(m.tenancy_objects(_prod(), "ml-research")["privileged"])
    assert calls == [["kubectl", "create", "--dry-run=server", "-f", "-"]] and "violates PodSecurity" in refusal


def _mig_project(where):
    """The `mig` config (every GPU cut into MIG slices, two teams) as a user's checkout has it."""
    from tests.conftest import CAPABILITIES, cdk_project, patched_context

    return cdk_project(patched_context("dev", CAPABILITIES["mig"]), where)


def _teams_recorded(folder, teams):
    """A recording of the tenancy probes of `teams` as they go where each is a tenant: the
    probes' last lines, and the refusal in the fixture's Kubernetes-documented form."""
    import shutil

    shutil.copytree(RECORDING, folder)
    refusal = (RECORDING / "dry-run" / "tenancy-privileged-ml-research.txt").read_text()
    for team in teams:
        for probe, verdict in (("imds", m.BLOCKED), ("same", m.CONNECTED), ("other", m.BLOCKED)):
            (folder / "logs" / f"{m.name('tenancy-' + probe, team)}.log").write_text(verdict + "\n")
        for other in teams:
            if other != team:
                (folder / "logs" / f"{m.name('tenancy-from', other, 'to', team)}.log").write_text(m.BLOCKED + "\n")
        name = m.name("tenancy-privileged", team)
        (folder / "dry-run" / f"{name}.txt").write_text(refusal.replace("tenancy-privileged-ml-research", name))
    return folder


def test_a_cluster_whose_gpus_are_all_mig_slices_still_gets_every_teams_tenancy_checks(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(_mig_project(tmp_path / "project"))
    settings = validation.load_settings(json.loads((tmp_path / "project" / "cdk.json").read_text())["context"], "dev")[0]
    assert accept.chosen_groups(settings) == []  # nothing whole for NCCL and DCGM
    recording = _teams_recorded(tmp_path / "run", ["research", "inference"])
    assert cli.main(["accept", "-c", "env=dev", "--from", str(recording)]) == 0
    report = capsys.readouterr().out
    assert re.search(r"^gpu +gpu checks +group +SKIP +cut into MIG slices \(mixed-3-1g.10gb-1-4g.40gb\)", report, re.M)
    for ns in ("hyperpod-ns-research", "hyperpod-ns-inference"):
        assert len(re.findall(rf"^{ns} +tenancy +.* PASS ", report, re.M)) == 5, report
    # And the metadata guard on each of the recording's four nodes.
    assert len(re.findall(r"^\w+ +metadata guard +hyperpod-i-\w+ +PASS +BLOCKED$", report, re.M)) == 4, report
    # And the agents behind the guard (the recording's aws-hyperpod and hyperpod-observability).
    assert len(re.findall(r"^\S+ +agents +.* PASS ", report, re.M)) == 3, report
    # What Kueue queues: the recording has no Kueue configuration, so each kind is skipped, not passed.
    assert len(re.findall(r"^kueue-system +kueue +\S+ +SKIP +not in the recording$", report, re.M)) == 3, report
    # HyperPod's health-monitoring agent on each Ready node of the GPU group (MIG or not).
    assert re.search(r"^gpu +health agent +2 node\(s\) +PASS ", report, re.M), report
    assert report.endswith("PASS: 22 checks, none failed\n")
    # What it applies: the namespace the outside probe runs in, then the probes, none of which
    # asks for a device of the cluster's (they need no GPU, MIG slice or EFA interface).
    assert cli.main(["accept", "-c", "env=dev", "--from", str(recording), "--render"]) == 0
    import yaml

    applied = list(yaml.safe_load_all(capsys.readouterr().out))
    assert applied[0] == m.namespace() and {o["kind"] for o in applied} == {"Namespace", "Job", "Service"}
    devices = {r for g in settings.hyperpod.instance_groups for r in g.device_resources}
    asked = {r for o in applied if o["kind"] == "Job" for c in o["spec"]["template"]["spec"]["containers"]
             for part in c["resources"].values() for r in part}
    assert asked == {"cpu", "memory"} and not asked & devices


def test_a_closed_network_refuses_a_public_probe_image_in_accept_and_warns_in_validate(tmp_path, capsys, monkeypatch):
    # ECR's interface endpoints serve this account's private registries only (ECR user guide).
    from tests.conftest import CAPABILITIES, cdk_project, patched_context

    ecr = "111111111111.dkr.ecr.us-east-1.amazonaws.com"
    patch = config.deep_merge(CAPABILITIES["closed-network"], {"acceptance": {
        "nccl_image": f"{ecr}/nccl-tests:2.20.0", "dcgm_image": f"{ecr}/dcgm:4.2.3-1-ubuntu22.04"}})
    monkeypatch.chdir(cdk_project(patched_context("dev", patch), tmp_path / "project"))
    monkeypatch.setenv("PATH", _path_with(tmp_path, None))
    assert cli.main(["validate", "-c", "env=dev"]) == 0
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if "acceptance." in line]
    assert warning.startswith("warning: dev: acceptance.probe_image: public.ecr.aws/docker/library/busybox:1.37.0 cannot be pulled")
    assert cli.main(["accept", "-c", "env=dev"]) == 2
    assert "error: acceptance.probe_image: public.ecr.aws/docker/library/busybox:1.37.0 cannot be pulled" in capsys.readouterr().err


# busybox wget's own words (networking/wget.c, libbb/xconnect.c), as the probe image prints them.
WGET_SAYS = {
    "timeout": "wget: download timed out",
    "refused": "wget: can't connect to remote host (10.100.7.9): Connection refused",
    "dns": "wget: bad address 'tenancy-listener-ml-research.hyperpod-ns-ml-research.svc'",
    "401": "wget: server returned error: HTTP/1.1 401 Unauthorized",
}


def _probe_says(tmp_path, obj, outcomes: list[str]) -> list[str]:
    """Run a probe's script in sh against a wget that answers each call with the next outcome
    (None: success, else a key of WGET_SAYS); the lines it prints."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = "\n".join(f'[ "$n" = {i} ] && {{ echo "{WGET_SAYS[o]}" >&2; exit 1; }}' if o else f'[ "$n" = {i} ] && exit 0'
                       for i, o in enumerate(outcomes, 1))
    counter = tmp_path / "n"
    counter.write_text("0")
    (bin_dir / "wget").write_text(f'#!/bin/sh\nn=$(( $(cat {counter}) + 1 )); echo $n > {counter}\n{script}\n'
                                  f'echo "{WGET_SAYS[outcomes[-1]] if outcomes[-1] else ""}" >&2; exit 1\n')
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    command = obj["spec"]["template"]["spec"]["containers"][0]["command"]
    result = subprocess.run(command, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
    return result.stdout.splitlines()


def test_only_a_timeout_counts_as_blocked(tmp_path):
    objects = m.tenancy_objects(_prod(), "ml-research")
    outside = objects["other team"]
    assert outside["metadata"]["namespace"] == "hyperpod-ns-ml-production"  # a second team's namespace
    assert _probe_says(tmp_path, outside, ["timeout"] * m.BLOCKED_TRIES)[-1] == m.BLOCKED
    # Connection refused, or a name that does not resolve: the listener was not there, no policy proved.
    assert _probe_says(tmp_path, outside, ["refused"])[-2:] == [WGET_SAYS["refused"], m.FAILED]
    assert _probe_says(tmp_path, outside, ["timeout", "dns"])[-2:] == [WGET_SAYS["dns"], m.FAILED]
    assert _probe_says(tmp_path, outside, ["timeout", None])[-1] == m.CONNECTED
    # The listener's own namespace waits through refusals (it is starting) until it answers.
    assert _probe_says(tmp_path, objects["same namespace"], ["refused", "dns", None])[-1] == m.CONNECTED
    # The metadata service: only a timeout is blocked; an IMDSv2 401 is an answer.
    assert _probe_says(tmp_path, objects["imds"], ["401"])[-2:] == [WGET_SAYS["401"], m.REACHED]
    assert _probe_says(tmp_path, objects["imds"], ["timeout"]) == [m.BLOCKED]


def _recorded(tmp_path, logs: dict[str, str]):
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(RECORDING, folder)
    for run_name, text in logs.items():
        (folder / "logs" / f"{run_name}.log").write_text(text)
    return accept.run(_prod(), accept.Recording(folder))


def test_a_cluster_without_the_policy_fails_the_proof_even_when_the_connection_is_refused(tmp_path):
    refused = f"{WGET_SAYS['refused']}\n{m.FAILED}\n"
    report = _recorded(tmp_path, {"tenancy-other-ml-research": refused, "tenancy-from-ml-production-to-ml-research": f"{m.CONNECTED}\n"})
    failed = {c.subject: c.detail for c in report.checks if c.group == "hyperpod-ns-ml-research" and c.status == "fail"}
    assert failed == {
        "from hyperpod-acceptance": f"{WGET_SAYS['refused']}: not a timeout, so no proof that a policy dropped it",
        "from hyperpod-ns-ml-production": m.CONNECTED,
    }


def test_the_outside_probes_start_only_after_the_listener_answers_its_own_namespace(tmp_path):
    folder_report = _recorded(tmp_path, {"tenancy-same-ml-research": f"{WGET_SAYS['refused']}\n{m.FAILED}\n"})
    checks = {c.subject: c for c in folder_report.checks if c.group == "hyperpod-ns-ml-research"}
    assert checks["from its own namespace"].status == "fail"
    for subject in ("from hyperpod-acceptance", "from hyperpod-ns-ml-production"):
        assert checks[subject].status == "fail" and checks[subject].detail.startswith("not run: the listener never answered")
    # In a live run: the outside probes are applied after the inside ones have been read.
    cluster = FakeCluster([], slow=None)
    accept.tenancy_checks(_prod(), cluster, "ml-research", sleep=lambda s: None, clock=lambda: 0.0)
    names = [o["metadata"]["name"] for o in cluster.applied]
    assert names.index("tenancy-same-ml-research") < names.index("tenancy-other-ml-research")
    assert names.index("tenancy-same-ml-research") < names.index("tenancy-from-ml-production-to-ml-research")


def test_a_node_without_the_metadata_guard_is_named(tmp_path):
    node = "hyperpod-i-0c1d2e3f4a5b60602"
    report = _recorded(tmp_path, {f"imds-guard-{node}": f"{WGET_SAYS['401']}\n{m.REACHED}\n"})
    guard = [c for c in report.checks if c.check == "metadata guard"]
    assert {c.subject for c in guard} == {"hyperpod-i-0c1d2e3f4a5b60601", node, "hyperpod-i-0a1b2c3d4e5f60701", "hyperpod-i-0a1b2c3d4e5f60702"}
    assert [(c.group, c.subject, c.status) for c in guard if c.status != "pass"] == [("system", node, "fail")]
    # Each probe is pinned to its node, on the pod network, tolerating every taint, and passes restricted.
    from tests.manifests import pod_security_standards as pss

    probe = m.guard_probe(_prod(), None, node)
    spec = probe["spec"]["template"]["spec"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0] == {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    assert "hostNetwork" not in spec and spec["tolerations"] == [{"operator": "Exists"}]
    assert pss.violations(pss.pod_of(probe["spec"]["template"]), "restricted") == []


KUEUE_QUEUES_ALL = """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
integrations:
  frameworks:
  - "batch/job"
  - "kubeflow.org/pytorchjob"
  externalFrameworks:
  - "HyperPodPytorchJob.v1.sagemaker.amazonaws.com"
"""


def kueue_config_map(text: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": text}}
