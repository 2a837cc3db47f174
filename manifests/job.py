"""The sample LLaMA FSDP training job as a HyperPodPyTorchJob, from the settings alone.

Plain data, no CDK: the sample-job stack applies it with KubernetesManifest and
`hyperpod-cdk render-job` prints it for `kubectl apply -f -`. Names come from
infra.naming (the team's namespace and queues), GPU and EFA counts from the instance
catalogue, and the log-monitoring rules from training/log_format.py, whose lines
training/train.py prints.
"""

from __future__ import annotations

from infra import admission, catalogue, naming
from infra.checks.sample_job import job_model
from infra.config import SampleJobSettings, Settings
from manifests import autoscaling
from training import log_format, model_shape

API_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"
CONTAINER = "pytorch"
SERVICE_ACCOUNT = "sample-job"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
# HyperPod labels every node with its instance group (the docs' node selectors use it).
GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
# The agent (hyperpodrun): its rendezvous writes /opt/ml/input/config before anything else,
# the operator reaches it on this port from its own namespace.
AGENT_DIR = "/opt/ml"
AGENT_PORT = 8080
OPERATOR_NAMESPACE = "aws-hyperpod"
# Writable homes for what the read-only root filesystem cannot hold: caches of Hugging Face,
# Triton and TorchInductor (torch.compile), and $HOME for anything else that writes there.
CACHE_DIR = "/tmp/cache"
# The env var naming the Secrets Manager secret that holds the Hugging Face token (train.py reads it).
HF_TOKEN_SECRET_ENV = log_format.HF_TOKEN_SECRET_ENV
# The job's own local scratch (the Hugging Face cache): an emptyDir, on the node's data
# volume where kubelet keeps pods' ephemeral storage (on_create.sh moves kubelet there), and
# deleted with the pod. Not a node folder shared with other jobs (a hostPath, which a team
# namespace's Pod Security level refuses): another team could read or poison it.
LOCAL_MOUNT = "/local"
# The share of the pod's slice of the node's data volume (ebs_volume_gb) its scratch may fill:
# the rest holds the images and the other pods' ephemeral storage.
LOCAL_SHARE = 0.5
# The FSx for Lustre claim every team namespace gets (fsx.enabled), and where pods see it.
FSX_CLAIM = "fsx"
FSX_MOUNT = naming.FSX_MOUNT
# What the config's memory check sized the job with.
SEQ_LEN = model_shape.JOB_SEQ_LEN
# The image's user (training/Dockerfile): a high UID that exists on no node.
RUN_AS_UID = 10001
# Log rules (seconds). The AWS training-operator usage page allows 600 s for the first loss
# and 1800 s for the first checkpoint: an 8B start (image pull, meta init, sharding,
# torch.compile's first step) needs minutes, the blog's 240 s would restart it. Then loss
# lines keep coming within HANG_S and checkpoints within CHECKPOINT_CADENCE_S.
FIRST_LOSS_S = 600
FIRST_CHECKPOINT_S = 1800
HANG_S = 300
CHECKPOINT_CADENCE_S = 600
# Throughput floor, as MFU: under it for THROUGHPUT_POINTS loss lines in a row (about five
# log windows) the job is faulted and restarted off the slow node. Eager FSDP reaches ~30%.
MIN_MFU = 0.10
THROUGHPUT_POINTS = 50
# The CUDA caching allocator's configuration.
ALLOC_CONF_ENV, ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"
# SIGTERM, then this long to save before SIGKILL (the agent's --shutdown-timeout, whose own
# default is 15 s; train.py's --stop-timeout, the budget its stop watchdog keeps under; the
# elastic policy's graceful shutdown; the pod's grace period adds a margin on top).
SHUTDOWN_S = 300
# train.py's speed options the job turns on (full activation checkpointing: it fits 40 GB A100s).
SPEED_FLAGS = ("--compile", "--fused-optimizer", "--fsdp-units=tuned")


# Deliberate deviations from checkov's Kubernetes checks, as checkov reads them (pod annotations).
CHECKOV_SKIPS = {
    "checkov.io/skip1": "CKV_K8S_8=Liveness is judged by the operator's log rules (JobHangingDetection) and the "
    "HyperPod health agent; a probe that restarts one rank breaks the collective of all ranks",
    "checkov.io/skip2": "CKV_K8S_9=Training pods serve no traffic; readiness gates nothing",
    "checkov.io/skip3": "CKV_K8S_43=The CDK image asset is tagged with its content hash, which pins the image like a digest",
}


def log_rules(settings: Settings) -> list[dict]:
    rules = [
        {
            "name": "JobStart",
            "logPattern": log_format.LOSS_PATTERN,
            "expectedStartCutOffInSeconds": FIRST_LOSS_S,
        },
        {
            # Training that stops printing batches is hanging (or its loss went NaN).
            "name": "JobHangingDetection",
            "logPattern": log_format.LOSS_VALUE_PATTERN,
            "expectedStartCutOffInSeconds": FIRST_LOSS_S,
            "expectedRecurringFrequencyInSeconds": HANG_S,
        },
        {
            "name": "CheckpointCadence",
            "logPattern": log_format.CHECKPOINT_PATTERN,
            "expectedStartCutOffInSeconds": FIRST_CHECKPOINT_S,
            "expectedRecurringFrequencyInSeconds": CHECKPOINT_CADENCE_S,
        },
    ]
    floor = throughput_floor(settings)
    if floor:
        rules.append(
            {
                "name": "LowThroughput",
                "logPattern": log_format.THROUGHPUT_PATTERN,
                "metricThreshold": floor,
                "operator": "lt",
                "metricEvaluationDataPoints": THROUGHPUT_POINTS,
            }
        )
    return rules


def throughput_floor(settings: Settings) -> int | None:
    """The job's tokens/s at MIN_MFU (the loss line reports the whole job's rate). None for
    the tiny preset, which is overhead-bound at any size of GPU, and for accelerators
    without a bf16 peak in the table."""
    job = settings.sample_job
    spec = settings.instance_group(job.instance_group).spec
    peak = model_shape.peak_tflops(spec.accelerator)
    model = job_model(settings)
    if model == "tiny" or not peak:
        return None
    preset = model_shape.PRESETS[model]
    # At the fewest nodes: an elastic job scaled up only clears the floor more easily.
    devices = job.nodes * spec.accelerators
    flops = model_shape.flops_per_token(preset, preset.vocab, SEQ_LEN[model])
    return int(MIN_MFU * peak * 1e12 * devices / flops)


def checkpoint_uri(settings: Settings) -> str:
    """Where the job's checkpoints go: its prefix of the checkpoint bucket (the stack creates
    it under this fixed name) or its team's directory of the FSx file system. Never the pod's
    scratch, which a restarted pod would not find (validation refuses checkpoint_to local)."""
    job = settings.sample_job
    if job.checkpoint_to == "s3":
        return f"s3://{settings.checkpoint_bucket_name}/{job.name}/checkpoints"
    return f"{FSX_MOUNT}/checkpoints/{job.name}"


def _labels(settings: Settings, job: SampleJobSettings) -> dict:
    labels = {"app.kubernetes.io/name": job.name, "app.kubernetes.io/part-of": "hyperpod-cdk"}
    if job.team:
        labels["kueue.x-k8s.io/queue-name"] = naming.team_names(job.team).local_queue
    if job.priority:
        labels["kueue.x-k8s.io/priority-class"] = naming.priority_class_name(job.priority)
    return labels


def needs_aws(settings: Settings) -> bool:
    """Whether the job calls AWS (S3 checkpoints, its token secret): the sample-job stack then gives
    its service account a Pod Identity role, in the namespace of `sample_job.team` alone."""
    return settings.sample_job.checkpoint_to == "s3" or bool(settings.sample_job.hf_token_secret)


def credentials_caution(deployed: Settings, team: str) -> str | None:
    """What the sample job lacks when rendered for `team` rather than the deployed one, or None
    (render-job warns of it; the team kit, which gives render-job's command, says it too)."""
    there = naming.team_names(team).namespace
    if needs_aws(deployed) and there != namespace(deployed):
        return (f"{there} has no Pod Identity role for service account {SERVICE_ACCOUNT} (the sample-job stack "
                f"made one in {namespace(deployed)} only): this job cannot reach its S3 checkpoints or token secret there until "
                f"the stack is deployed with sample_job.team: {team}")
    return None


def namespace(settings: Settings) -> str:
    job = settings.sample_job
    return naming.team_names(job.team).namespace if job.team else "default"


def _topology_annotations(settings: Settings) -> dict:
    mode = settings.topology.mode
    if mode == "none":
        return {}
    return {f"kueue.x-k8s.io/podset-{mode}-topology": settings.topology.level}


def _command(settings: Settings, nodes: int, gpus: int, checkpoint_uri: str) -> list[str]:
    job = settings.sample_job
    model = job_model(settings)
    return [
        "hyperpodrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={gpus}",
        "--server-host=0.0.0.0",
        f"--server-port={AGENT_PORT}",
        "--tee=3",
        "--log_dir=/tmp/hyperpod",
        # Its default is SIGKILL: a stop would lose everything since the last checkpoint.
        "--shutdown-signal=SIGTERM",
        f"--shutdown-timeout={SHUTDOWN_S}",
        "/workspace/train.py",
        f"--model={model}",
        f"--tokenizer={job.tokenizer}",
        *_data_args(job),
        f"--seq-len={SEQ_LEN[model]}",
        f"--batch-size={model_shape.JOB_BATCH}",
        f"--max-steps={job.max_steps}",
        f"--warmup-steps={model_shape.job_warmup_steps(model, job.max_steps)}",
        # The global batch the learning rate is taken to be given for (the project's choice, model_shape.JOB_LR_BATCH_TOKENS).
        *([f"--lr-batch-tokens={model_shape.JOB_LR_BATCH_TOKENS[model]}"] if model in model_shape.JOB_LR_BATCH_TOKENS else []),
        f"--checkpoint-dir={checkpoint_uri}",
        f"--checkpoint-interval={job.checkpoint_interval_steps}",
        f"--keep-checkpoints={job.keep_checkpoints}",
        # The stop watchdog ends a stop that cannot save before the agent's SIGKILL.
        f"--stop-timeout={SHUTDOWN_S}",
        # Training waits only for the copy to host memory, not for the write (the 8B's 96 GB:
        # on the CPU bench, 2.5 s instead of 11 s per save of 2.5 GB).
        "--async-checkpoint",
        *SPEED_FLAGS,
    ]


def _data_args(job: SampleJobSettings) -> list[str]:
    if job.dataset.files:  # text files on FSx, streamed by the same loader
        return ["--data-files", *job.dataset.files]
    return [
        f"--dataset={job.dataset.name}",
        *([f"--dataset-config={job.dataset.config}"] if job.dataset.config else []),
        f"--dataset-split={job.dataset.split}",
    ]


def _node_affinity(group) -> dict:
    """Healthy nodes of the job's group. On a group Karpenter scales from 0, Karpenter must
    find a NodePool that can make a node the pod fits: HyperPod's provider supports only the
    instance-type, zone and arch requirement keys (HyperPod docs, autoscaling with Karpenter,
    "Create a NodePool"), and a required label it cannot know leaves the pod Pending with no
    node added. There the type is required and health and group are preferred."""
    health = {"key": HEALTH_LABEL, "operator": "In", "values": ["Schedulable"]}
    group_label = {"key": GROUP_LABEL, "operator": "In", "values": [group.name]}
    instance_type = {"key": autoscaling.INSTANCE_TYPE_LABEL, "operator": "In", "values": [group.instance_type]}
    if not group.autoscaled:
        required = [health, group_label, instance_type]
        return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": required}]}}
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [instance_type]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [health, group_label]}}
        ],
    }


def build(settings: Settings, *, image: str) -> dict:
    """The HyperPodPyTorchJob object. Call with validated settings (validation.check)."""
    job = settings.sample_job
    group = settings.instance_group(job.instance_group)
    spec = group.spec
    labels = _labels(settings, job)
    # One slice: one process, and its slice's share of the node's CPUs and memory; else the
    # whole node, the resources the accelerator gate waits to see allocatable. What Kueue
    # counts against the team's quota is this (infra/admission.py).
    gpus = 1 if job.gpu_partition else spec.accelerators
    share = admission.node_share(group, job.gpu_partition)
    resources: dict = admission.pod_requests(group, job.gpu_partition)
    memory_gib = resources.pop("memory")
    resources["cpu"] = str(resources["cpu"])
    resources["memory"] = f"{memory_gib}Gi"
    efa = catalogue.EFA_RESOURCE in resources
    env = [
        # The agent's rendezvous reads the node count from here.
        {"name": "NNODES", "value": str(job.nodes)},
        *([{"name": "FI_PROVIDER", "value": "efa"}] if efa else []),
        *([{"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"}] if efa and spec.efa_rdma_read else []),
        *([{"name": "FI_EFA_FORK_SAFE", "value": "1"}] if efa else []),
        {"name": "NCCL_SOCKET_IFNAME", "value": "^lo,docker"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "1"},
        # Segments that grow instead of new blocks of other sizes: less memory lost between blocks,
        # which the memory projection counts on (torchtitan's launcher sets it: run_train.sh). The
        # image's PyTorch 2.7 reads this name; 2.9 renamed it PYTORCH_ALLOC_CONF and reads both.
        {"name": ALLOC_CONF_ENV, "value": ALLOC_CONF},
        {"name": "HOME", "value": f"{CACHE_DIR}/home"},
        {"name": "XDG_CACHE_HOME", "value": CACHE_DIR},
        {"name": "TRITON_CACHE_DIR", "value": f"{CACHE_DIR}/triton"},
        {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{CACHE_DIR}/inductor"},
        {"name": "HF_HOME", "value": f"{LOCAL_MOUNT}/hf-cache"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if job.hf_token_secret:
        # The name of the secret, not the token: train.py reads it at start with the job's Pod
        # Identity role, so the token is in neither the pod spec nor a Kubernetes secret.
        env += [{"name": HF_TOKEN_SECRET_ENV, "value": job.hf_token_secret}, {"name": "AWS_REGION", "value": settings.region}]
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "Always",
        "command": _command(settings, job.nodes, gpus, checkpoint_uri(settings)),
        "env": env,
        "ports": [{"containerPort": AGENT_PORT, "name": "agent"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "local", "mountPath": LOCAL_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "agent", "mountPath": AGENT_DIR},
            *([{"name": FSX_CLAIM, "mountPath": FSX_MOUNT}] if settings.fsx.enabled else []),
        ],
        # EFA and NCCL need no Linux capabilities: the device plugin hands over the devices.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    affinity = {"nodeAffinity": _node_affinity(group)}
    pod_spec = {
        "serviceAccountName": SERVICE_ACCOUNT,
        # Pod Identity injects its own token volume; training needs no Kubernetes API token.
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": affinity,
        "terminationGracePeriodSeconds": SHUTDOWN_S + 30,
        "containers": [container],
        "volumes": [
            # NCCL and the data loader need far more shared memory than the 64 MiB default.
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{max(1, min(memory_gib // 2, max(8, spec.memory_gib // 4)))}Gi"}},
            {"name": "local", "emptyDir": {"sizeLimit": f"{max(1, int(group.ebs_volume_gb * LOCAL_SHARE * share))}Gi"}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "agent", "emptyDir": {}},
            *([{"name": FSX_CLAIM, "persistentVolumeClaim": {"claimName": FSX_CLAIM}}] if settings.fsx.enabled else []),
        ],
    }
    tolerations = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in group.taints]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    template_metadata = {"labels": dict(labels), "annotations": {**_topology_annotations(settings), **CHECKOV_SKIPS}}
    replicas = {"name": "pods", "replicas": job.nodes, "spares": 0, "template": {"metadata": template_metadata, "spec": pod_spec}}
    elastic = {}
    if job.max_nodes is not None:
        # Elastic training (training operator v1.2+): the operator scales the job between
        # nodes and max_nodes, stopping it (a save) and restarting it on the new world;
        # train.py re-divides the data position over the new ranks. The fields as the hyp
        # CLI's PyTorchJobConfig.to_domain writes them.
        replicas["maxReplicas"] = job.max_nodes
        elastic = {"elasticPolicy": {"minReplicas": job.nodes, "maxReplicas": job.max_nodes, "gracefulShutdownTimeoutInSeconds": SHUTDOWN_S}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job.name, "namespace": namespace(settings), "labels": labels},
        "spec": {
            "nprocPerNode": str(gpus),
            "replicaSpecs": [replicas],
            "runPolicy": {
                "jobMaxRetryCount": 10,
                "cleanPodPolicy": "None",
                "ttlSecondsAfterFinished": 3600,
                # Restart only the failed pods first; a full job restart after three of those
                # within six hours.
                "restartPolicy": {"numRestartBeforeFullJobRestart": 3, "evalPeriodSeconds": 21600, "maxFullJobRestarts": 2},
                "logMonitoringConfiguration": log_rules(settings),
            },
            **elastic,
        },
    }


def network_policy(settings: Settings) -> dict:
    """Ingress from the job's own pods (rendezvous and NCCL) and from the training operator
    to the agent's port; egress stays open for S3 checkpoints and the dataset. Enforced
    where the VPC CNI's network policy is on."""
    name = settings.sample_job.name
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace(settings), "labels": {"app.kubernetes.io/part-of": "hyperpod-cdk"}},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": name}}}]},
                {
                    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}}}],
                    "ports": [{"protocol": "TCP", "port": AGENT_PORT}],
                },
            ],
        },
    }


def objects(settings: Settings, *, image: str) -> list[dict]:
    """Everything the job needs, in apply order."""
    return [service_account(settings), network_policy(settings), build(settings, image=image)]


def service_account(settings: Settings) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace(settings), "labels": {"app.kubernetes.io/part-of": "hyperpod-cdk"}},
    }


def to_yaml(objects: list[dict]) -> str:
    """Multi-document YAML for `kubectl apply -f -`."""
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)
