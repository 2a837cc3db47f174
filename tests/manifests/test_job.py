"""The sample job manifest: the official CRD models accept it, and it says what config says."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from cli import main as cli
from infra import config, naming, validation
from infra.checks.sample_job import memory_note
from manifests import job as job_manifest
from tests.conftest import CONTEXT, ENVIRONMENTS, ROOT, patched_context
from training import log_format
from tests.manifests.official import model_module

MODEL_FILE = "sagemaker/hyperpod/training/config/hyperpod_pytorch_job_unified_config.py"
IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1"


@pytest.fixture(scope="module")
def crd_model():
    """_HyperPodPytorchJob from the official sagemaker-hyperpod package, loaded by path."""
    return model_module(MODEL_FILE)._HyperPodPytorchJob


def _job(env="dev", patch=None):
    ctx = patched_context(env, patch) if patch else CONTEXT
    settings, _ = validation.load_settings(ctx, env)
    return settings, job_manifest.build(settings, image="111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1")


def _validate(model, manifest):
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}  # the top level ignores extras: check here
    assert manifest["apiVersion"] == "sagemaker.amazonaws.com/v1" and manifest["kind"] == "HyperPodPyTorchJob"
    return model.model_validate(manifest["spec"], by_alias=False, by_name=True)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_rendered_spec_validates_against_the_official_models_strictly(crd_model, env):
    _, manifest = _job(env)
    parsed = _validate(crd_model, manifest)
    assert parsed.replicaSpecs[0].template.spec.containers[0].name == "pytorch"


@pytest.mark.parametrize(
    "path, typo",
    [
        (("spec", "replicaSpecs", 0, "template", "spec", "containers", 0), "volumeMount"),
        (("spec", "runPolicy"), "jobMaxRetries"),
        (("spec", "runPolicy", "logMonitoringConfiguration", 0), "expectedStartCutoffInSeconds"),
    ],
)
def test_a_misspelled_field_is_caught(crd_model, path, typo):
    _, manifest = _job()
    broken = copy.deepcopy(manifest)
    node = broken
    for part in path:
        node = node[part]
    node[typo] = 1
    with pytest.raises(ValidationError, match=typo):
        _validate(crd_model, broken)


def test_queue_priority_and_namespace_come_from_the_team_naming_function():
    settings, manifest = _job("prod")
    names = naming.team_names("ml-research")
    assert manifest["metadata"]["namespace"] == names.namespace
    for labels in (manifest["metadata"]["labels"], manifest["spec"]["replicaSpecs"][0]["template"]["metadata"]["labels"]):
        assert labels["kueue.x-k8s.io/queue-name"] == names.local_queue
        assert labels["kueue.x-k8s.io/priority-class"] == "training-priority"


def test_topology_annotation_is_on_the_pod_template():
    _, manifest = _job("prod")
    template = manifest["spec"]["replicaSpecs"][0]["template"]
    topology = {k: v for k, v in template["metadata"]["annotations"].items() if k.startswith("kueue")}
    assert topology == {"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3"}
    assert "annotations" not in manifest["metadata"]
    _, dev = _job("dev")
    assert not [k for k in dev["spec"]["replicaSpecs"][0]["template"]["metadata"]["annotations"] if k.startswith("kueue")]


def test_pods_run_non_root_read_only_without_capabilities_or_api_token():
    _, manifest = _job("prod")
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] >= 10000
    assert pod["automountServiceAccountToken"] is False
    container = pod["containers"][0]["securityContext"]
    assert container == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def test_replicas_gpus_and_efa_come_from_the_instance_catalogue():
    _, manifest = _job("prod")
    replica = manifest["spec"]["replicaSpecs"][0]
    container = replica["template"]["spec"]["containers"][0]
    assert replica["replicas"] == 2 and manifest["spec"]["nprocPerNode"] == "8"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32, "cpu": "172", "memory": "1740Gi"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert "--nnodes=2" in container["command"] and "--nproc-per-node=8" in container["command"]
    _, dev = _job("dev")
    limits = dev["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1 and limits["vpc.amazonaws.com/efa"] == 1


def test_pods_go_to_healthy_nodes_of_the_group_with_shm_nvme_and_efa_env():
    _, manifest = _job("prod")
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "sagemaker.amazonaws.com/node-health-status", "operator": "In", "values": ["Schedulable"]} in term["matchExpressions"]
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["ml.p5.48xlarge"]} in term["matchExpressions"]
    # HyperPod's own node label, so two groups of one type are told apart
    assert {"key": "sagemaker.amazonaws.com/instance-group-name", "operator": "In", "values": ["gpu"]} in term["matchExpressions"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"/dev/shm", "/local", "/tmp", "/opt/ml"}  # the token is read from Secrets Manager, not mounted
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The scratch is the pod's own, half of its node's 1000 GB data volume; nothing of the node's is mounted.
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory" and volumes["local"] == {"name": "local", "emptyDir": {"sizeLimit": "500Gi"}}
    assert not any("hostPath" in v for v in pod["volumes"])
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert pod["containers"][0]["command"][0] == "hyperpodrun"


def test_the_allocator_grows_segments_as_torchtitans_launcher_sets_it():
    # pytorch/torchtitan @ 01424cb2, run_train.sh line 24: PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"
    # before torchrun (its newer launcher writes PYTORCH_ALLOC_CONF, PyTorch 2.9's name; the image's
    # 2.7 reads the one set here, as training/Dockerfile's base tag says).
    _, job = _job("prod")
    env = {e["name"]: e["value"] for e in job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["env"]}
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "pytorch-training:2.7" in (ROOT / "training" / "Dockerfile").read_text()


def test_run_policy_restarts_partially_first_and_watches_the_logs():
    _, manifest = _job("dev")
    run = manifest["spec"]["runPolicy"]
    assert run["jobMaxRetryCount"] > 0 and run["cleanPodPolicy"] == "None"
    assert run["restartPolicy"]["numRestartBeforeFullJobRestart"] >= 1
    rules = {r["name"]: r for r in run["logMonitoringConfiguration"]}
    # The AWS training-operator usage page: 600 s for the first loss, 1800 s for the first checkpoint.
    assert rules["JobStart"]["expectedStartCutOffInSeconds"] == 600
    assert rules["JobHangingDetection"]["expectedStartCutOffInSeconds"] == 600
    assert rules["JobHangingDetection"]["expectedRecurringFrequencyInSeconds"] > 0
    assert rules["CheckpointCadence"]["expectedStartCutOffInSeconds"] == 1800
    assert rules["CheckpointCadence"]["expectedRecurringFrequencyInSeconds"] == 600
    assert "LowThroughput" not in rules  # the tiny preset is overhead-bound: no floor


def test_throughput_rule_floor_is_ten_percent_mfu_by_hand_and_reads_the_loss_line():
    import re

    from training import log_format

    _, manifest = _job("prod")
    (rule,) = [r for r in manifest["spec"]["runPolicy"]["logMonitoringConfiguration"] if r["name"] == "LowThroughput"]
    # 2 nodes x 8 H100 at 989 TFLOPS; LLaMA 3.1 8B at 8192 tokens: 6 x 7,504,924,672 non-embedding
    # parameters + 12 x 32 layers x 4096 x 8192 = 57,914,449,920 FLOPs per token.
    assert rule["metricThreshold"] == int(0.10 * 989e12 * 16 / 57_914_449_920)
    assert rule["operator"] == "lt" and rule["metricEvaluationDataPoints"] >= 10
    line = log_format.LOSS_LINE.format(step=12, loss=2.5, lr=3e-4, tps=31234.5) + " mfu=0.114"
    assert float(re.fullmatch(rule["logPattern"], line).group(1)) == 31234.5


def test_efa_rdma_read_is_asked_for_only_where_the_instance_has_it():
    # FACTS: FI_EFA_USE_DEVICE_RDMA=1 aborts libfabric on g5/g6; p4d/p5/p6 and trn have RDMA read.
    for env, expected in (("prod", "1"), ("dev", None)):
        _, manifest = _job(env)
        env_vars = {e["name"]: e.get("value") for e in manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["env"]}
        assert env_vars.get("FI_EFA_USE_DEVICE_RDMA") == expected, env


def test_the_operator_namespace_reaches_the_agent_port_and_nothing_else_gets_in():
    settings, _ = validation.load_settings(CONTEXT, "prod")
    policy = job_manifest.network_policy(settings)
    own, operator = policy["spec"]["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": settings.sample_job.name}}}]}
    # The training operator runs in aws-hyperpod (FACTS) and calls the agent's --server-port.
    assert operator["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "aws-hyperpod"}}}]
    port = next(a for a in job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
                if a.startswith("--server-port="))
    assert operator["ports"] == [{"protocol": "TCP", "port": int(port.split("=")[1])}]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_local_checkpoints_are_refused_as_the_pods_scratch_goes_with_the_pod(env):
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context(env, {"sample_job": {"checkpoint_to": "local"}}), env)
    assert any(p.startswith(f"{env}: sample_job.checkpoint_to: 'local' must be s3 or fsx: the job's local scratch") for p in exc.value.problems)


def test_the_gated_tokenizer_needs_its_secret_and_the_8b_model_wants_it():
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context("prod", {"sample_job": {"hf_token_secret": None}}), "prod")
    assert any("sample_job.hf_token_secret: None is required: meta-llama/Llama-3.1-8B is gated on Hugging Face" in p for p in exc.value.problems)
    _, warnings = validation.load_settings(patched_context("prod", {"sample_job": {"tokenizer": "hf-internal-testing/llama-tokenizer"}}), "prod")
    assert any("sample_job.tokenizer: hf-internal-testing/llama-tokenizer is not the LLaMA 3 tokenizer" in w for w in warnings)


def test_the_gated_tokenizer_token_comes_from_a_secret_never_from_config():
    _, manifest = _job("dev", {"sample_job": {"tokenizer": "meta-llama/Llama-3.1-8B", "hf_token_secret": "hyperpod/dev/hf-token"}})
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    # The secret's name and region for train.py (load_hf_token); never the token itself.
    assert env[log_format.HF_TOKEN_SECRET_ENV] == "hyperpod/dev/hf-token" and env["AWS_REGION"] == "us-east-1"
    assert "HF_TOKEN" not in env and "hf-token" not in json.dumps(pod["volumes"])


def test_the_secret_name_follows_secrets_managers_rules_and_validation_says_how_to_create_it():
    assert any("aws secretsmanager create-secret --name hyperpod/prod/hf-token" in p for p in _problems_of({"sample_job": {"hf_token_secret": None}}))
    assert any("is not a Secrets Manager secret name" in p for p in _problems_of({"sample_job": {"hf_token_secret": "hf token"}}))
    assert any("six characters" in p for p in _problems_of({"sample_job": {"hf_token_secret": "hf-token-a1B2c3"}}))


def _problems_of(patch: dict) -> list[str]:
    try:
        validation.load_settings(patched_context("prod", patch), "prod")
    except config.ConfigError as err:
        return err.problems
    return []


def test_gpu_or_efa_counts_that_do_not_match_the_type_are_refused():
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context("prod", {"sample_job": {"gpus_per_node": 4, "efa_per_node": 4}}), "prod")
    assert any("sample_job.gpus_per_node: 4 does not match ml.p5.48xlarge, which has 8" in p for p in exc.value.problems)
    assert any("sample_job.efa_per_node: 4 does not match ml.p5.48xlarge, which has 32 EFA" in p for p in exc.value.problems)


def test_the_builder_needs_no_cdk():
    code = "import sys, manifests.job, cli.main; assert 'aws_cdk' not in sys.modules and 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# ------------------------------------------------------------------ render-job


def _render(capsys, *args):
    rc = cli.main(["render-job", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_render_job_prints_the_same_manifest_as_the_stack(capsys):
    import yaml

    rc, out, _ = _render(capsys, "-c", "env=prod", "--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1")
    assert rc == 0
    sa, policy, manifest = list(yaml.safe_load_all(out))
    assert sa["kind"] == "ServiceAccount" and policy["kind"] == "NetworkPolicy"
    assert manifest == _job("prod")[1]


def test_render_job_overrides_in_the_spirit_of_hyp_create(capsys, crd_model):
    import yaml

    rc, out, err = _render(capsys, "-c", "env=prod", "--image", IMAGE, "--nodes", "3", "--team", "ml-production",
                           "--priority", "inference", "--preferred-topology", "topology.k8s.aws/network-node-layer-2", "--max-steps", "10")
    assert rc == 0
    # ml-production holds 2 nodes and may borrow 50% of them: the third is borrowed, and said so.
    assert "warning: prod: sample_job.nodes: 3 nodes of ml.p5.48xlarge (24 GPUs) are admitted for team ml-production only by borrowing" in err
    manifest = list(yaml.safe_load_all(out))[-1]
    _validate(crd_model, manifest)
    assert manifest["spec"]["replicaSpecs"][0]["replicas"] == 3
    assert manifest["metadata"]["namespace"] == "hyperpod-ns-ml-production"
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "inference-priority"
    annotations = manifest["spec"]["replicaSpecs"][0]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("kueue")} == {
        "kueue.x-k8s.io/podset-preferred-topology": "topology.k8s.aws/network-node-layer-2"}
    assert "--max-steps=10" in json.dumps(manifest)


@pytest.mark.parametrize(
    "args, message",
    [
        # Each refused as the flag that gave it (cli/render_job.py), by the rule the config field has.
        (["--nodes", "9"], "--nodes: 9 is more than instance group 'gpu' can have (4)"),
        # The README's old example: 2 nodes + 50% borrowed = 3 of the 4 asked for (infra/admission.py).
        (["--nodes", "4", "--team", "ml-production"], "error: prod: --nodes: 4 nodes of ml.p5.48xlarge (32 GPUs) can never be "
         "admitted for team ml-production: 16 guaranteed + at most 8 borrowed (borrow_limit 50% of its quota) = 24 GPUs; at most 3 nodes"),
        (["--nodes", "0"], "--nodes: 0 is invalid: Input should be greater than or equal to 1"),
        (["--nodes", "-3"], "--nodes: -3 is invalid: Input should be greater than or equal to 1"),
        (["--max-steps", "0"], "--max-steps: 0 is invalid: Input should be greater than or equal to 1"),
        (["--team", "nobody"], "--team: 'nobody' is not a team"),
        (["--priority", "urgent"], "--priority: 'urgent' is not a priority class"),
        (["--required-topology", "topology.k8s.aws/rack"], "--required-topology: 'topology.k8s.aws/rack' is not a topology level"),
        # The image reference grammar, as for sample_job.image_uri (infra/grammars.py).
        (["--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/Train:1"], "--image: '111111111111.dkr.ecr.us-east-1.amazonaws.com/Train:1' breaks the grammar"),
    ],
)
def test_render_job_overrides_are_validated_by_the_same_rules(capsys, args, message):
    rc, out, err = _render(capsys, "-c", "env=prod", "--image", IMAGE, *args)
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_render_job_needs_an_image(capsys):
    rc, _, err = _render(capsys, "-c", "env=dev")
    assert rc == 2 and "--image is required" in err


def test_validate_and_render_job_print_the_jobs_memory_margin(capsys):
    # The one projection the config admits the job with (infra/checks/sample_job.py memory_fit):
    # prod's 8B over 16 H100, what it needs of each GPU and the margin left.
    margin = ("sample job: llama3.1-8b needs about 30.5 GiB of the 78.4 GiB PyTorch sees of ml.p5.48xlarge's H100 (80.0 GiB "
              "nominal, less 2% assumed) per GPU over 16 ranks (39%, margin 47.9 GiB)")
    assert memory_note(_job("prod")[0]) == margin
    _, _, err = _render(capsys, "-c", "env=prod", "--image", IMAGE)
    assert f"note: {margin}" in err.splitlines()
    assert cli.main(["validate", "-c", "env=prod"]) == 0
    assert f"ok: prod ({margin})" in capsys.readouterr().out.splitlines()
