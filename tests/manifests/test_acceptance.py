"""The acceptance run's manifests: the pod templates validate against the official Kubernetes
pod-template model, the MPIJob uses only the MPI operator's fields, the names are Kubernetes
names, and every node of the group gets one NCCL worker and one DCGM Job holding all its devices."""

from __future__ import annotations

import json

import subprocess
import sys

import pytest
import yaml
from pydantic import ValidationError

from cli import main as cli
from infra import catalogue, naming, validation
from manifests import acceptance as m
from tests.conftest import CONTEXT, ROOT, patched_context
from tests.manifests.official import model_module

MODEL_FILE = "sagemaker/hyperpod/training/config/hyperpod_pytorch_job_unified_config.py"
NODES = ["hyperpod-i-0a1b2c3d4e5f60701", "hyperpod-i-0a1b2c3d4e5f60702", "hyperpod-i-0a1b2c3d4e5f60703"]
RECORDING = ROOT / "tests" / "fixtures" / "acceptance" / "prod-two-nodes"

# The MPIJob v2beta1 fields of the MPI operator the HyperPod dependencies chart installs: its CRD
# (helm_chart/HyperPodHelmChart/charts/mpi-operator/templates/mpijob-crd.yaml in
# aws/sagemaker-hyperpod-cli at 011ca92, 2026-06-22; the chart's files are not kept here, so the
# field names are carried over, read from spec.versions[v2beta1].schema).
MPIJOB_SPEC_FIELDS = {"launcherCreationPolicy", "mpiImplementation", "mpiReplicaSpecs", "runLauncherAsWorker",
                      "runPolicy", "slotsPerWorker", "sshAuthMountPath"}
MPIJOB_RUN_POLICY_FIELDS = {"activeDeadlineSeconds", "backoffLimit", "cleanPodPolicy", "schedulingPolicy", "suspend",
                            "ttlSecondsAfterFinished"}
MPIJOB_REPLICA_FIELDS = {"replicas", "restartPolicy", "template"}


@pytest.fixture(scope="module")
def pod_template():
    """The Kubernetes PodTemplateSpec model (extra fields forbidden) the official sagemaker-hyperpod
    package generates from the HyperPodPyTorchJob CRD, loaded by path."""
    return model_module(MODEL_FILE).Template


def _prod():
    return validation.load_settings(CONTEXT, "prod")[0]


def _objects(settings=None, nodes=NODES):
    settings = settings or _prod()
    return m.objects(settings, {"gpu": nodes})


def _templates(obj: dict) -> list[dict]:
    if obj["kind"] == "MPIJob":
        return [r["template"] for r in obj["spec"]["mpiReplicaSpecs"].values()]
    return [obj["spec"]["template"]] if obj["kind"] == "Job" else []


def test_every_pod_template_validates_strictly_against_the_official_model(pod_template):
    templates = [t for obj in _objects() for t in _templates(obj)]
    assert len(templates) == 2 + len(NODES)  # launcher, worker, one DCGM Job per node
    for template in templates:
        pod_template.model_validate(template, by_alias=False, by_name=True)


def test_a_misspelled_pod_field_is_caught(pod_template):
    job = m.dcgm_job(_prod(), _prod().instance_group("gpu"), NODES[0])
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(ValidationError, match="volumeMount"):
        pod_template.model_validate(job["spec"]["template"], by_alias=False, by_name=True)


def test_the_mpijob_uses_only_the_mpi_operators_v2beta1_fields():
    (job,) = [o for o in _objects() if o["kind"] == "MPIJob"]
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    assert set(job["spec"]) <= MPIJOB_SPEC_FIELDS and set(job["spec"]["runPolicy"]) <= MPIJOB_RUN_POLICY_FIELDS
    assert set(job["spec"]["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        assert set(replica) <= MPIJOB_REPLICA_FIELDS


def test_names_are_kubernetes_names_with_room_for_the_operators_suffixes():
    long_nodes = [f"hyperpod-i-0a1b2c3d4e5f6070{i}-with-a-much-longer-name-than-hyperpod-gives" for i in range(3)]
    for nodes in (NODES, long_nodes):
        names = [o["metadata"]["name"] for o in _objects(nodes=nodes)]
        assert len(set(names)) == len(names)
        for name in names:
            assert naming.K8S_LABEL.match(name) and len(name) <= m.NAME_MAX, name
            # The MPI operator's pods: <name>-launcher, <name>-worker-<n>; a DNS label is 63 at most.
            assert len(f"{name}-worker-{len(nodes) - 1}") <= naming.K8S_LABEL_MAX


def test_one_worker_on_each_node_holding_every_gpu_and_efa_interface_from_the_catalogue():
    (job,) = [o for o in _objects() if o["kind"] == "MPIJob"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    pod = worker["template"]["spec"]
    assert worker["replicas"] == len(NODES) and job["spec"]["slotsPerWorker"] == 8
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In", "values": NODES}]
    # Each worker holds all of a node's GPUs, so the scheduler cannot put two on one node.
    p5 = catalogue.CATALOGUE["ml.p5.48xlarge"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == p5.accelerators and limits["vpc.amazonaws.com/efa"] == p5.efa_interfaces


def test_mpirun_spans_all_ranks_over_efa_and_sweeps_to_the_published_message_size():
    (job,) = [o for o in _objects() if o["kind"] == "MPIJob"]
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    arg = lambda flag: command[command.index(flag) + 1]  # noqa: E731
    assert arg("-np") == str(8 * len(NODES)) and arg("-N") == "8" and "--tag-output" in command
    exported = [command[i + 1] for i, a in enumerate(command) if a == "-x"]
    assert {"FI_PROVIDER=efa", "FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1"} <= set(exported)
    # The awsome MPIJob's all_reduce_perf sweep (micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml):
    # from 8 B, doubling, one GPU per rank, results checked, 100 iterations.
    tail = command[command.index(m.ALL_REDUCE_PERF):]
    assert tail == [m.ALL_REDUCE_PERF, "-b", "8", "-e", str(16 * 1024**3), "-f", "2", "-g", "1", "-c", "1", "-n", "100"]
    assert int(arg("-e")) == catalogue.NCCL_ALL_REDUCE_BUSBW["ml.p5.48xlarge"].message_bytes


def test_rdma_read_is_asked_for_only_where_the_type_has_it():
    settings = validation.load_settings(CONTEXT, "dev")[0]  # gpu: ml.g5.8xlarge, one EFA interface, no RDMA read
    job = m.nccl_job(settings, settings.instance_group("gpu"), NODES[:2])
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert "FI_PROVIDER=efa" in command and "FI_EFA_USE_DEVICE_RDMA=1" not in command
    assert command[command.index("-e") + 1] == str(m.DEFAULT_MESSAGE_BYTES)  # no published figure for g5


def test_each_node_gets_a_dcgm_level_2_job_holding_all_its_gpus():
    jobs = [o for o in _objects() if o["kind"] == "Job"]
    assert len(jobs) == len(NODES)
    for job, node in zip(jobs, NODES):
        pod = job["spec"]["template"]["spec"]
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchExpressions"][0]["values"] == [node]
        container = pod["containers"][0]
        assert "dcgmi diag -r 2" in container["command"][-1]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
        assert job["spec"]["activeDeadlineSeconds"] == m.DCGM_DEADLINE_S


def test_the_dcgm_budget_covers_the_awsome_level_2_timeout():
    # awsome 4.validation_and_observability/2.gpu-cluster-healthcheck/checks/1-dcgm-diag-l2.sh:
    # DCGM_TIMEOUT defaults to 900 s for level 2; the image pull comes on top.
    assert m.DCGM_DEADLINE_S > 900


def test_group_taints_are_tolerated_on_every_pod():
    settings = validation.load_settings(CONTEXT, "prod")[0]
    patch = {"hyperpod": {"instance_groups": [g.model_dump(mode="json", exclude_unset=True) for g in settings.hyperpod.instance_groups]}}
    patch["hyperpod"]["instance_groups"][1]["taints"] = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    tainted = validation.load_settings(patched_context("prod", patch), "prod")[0]
    for obj in _objects(tainted):
        for template in _templates(obj):
            assert template["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_single_node_group_gets_diagnostics_but_no_fabric_test():
    kinds = [o["kind"] for o in _objects(nodes=NODES[:1])]
    assert kinds == ["Namespace", "Job"]


def test_accept_render_prints_the_objects_the_run_applies(capsys):
    assert cli.main(["accept", "-c", "env=prod", "--render", "--from", str(RECORDING)]) == 0
    rendered = list(yaml.safe_load_all(capsys.readouterr().out))
    probes = [o for t in ("ml-research", "ml-production") for k, o in m.tenancy_objects(_prod(), t).items() if k != "privileged"]
    nodes = json.loads((RECORDING / "nodes.json").read_text())["items"]
    guards = [m.guard_probe(_prod(), None, n["metadata"]["name"]) for group in ("system", "gpu") for n in nodes
              if n["metadata"]["labels"]["sagemaker.amazonaws.com/instance-group-name"] == group]
    assert rendered == _objects(nodes=NODES[:2]) + guards + probes


def test_the_builder_needs_no_cdk():
    code = "import sys, manifests.acceptance, cli.accept; assert 'aws_cdk' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
