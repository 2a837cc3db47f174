"""The sample LLaMA FSDP training job as a HyperPodPyTorchJob, from the settings alone.

Plain data, no CDK: the sample-job stack applies it with KubernetesManifest and
`hyperpod-cdk render-job` prints it for `kubectl apply -f -`. Names come from
infra.naming (the team's namespace and queues), GPU and EFA counts from the instance
catalogue, and the log-monitoring rules from training/log_format.py, whose lines
training/train.py prints.
"""

from __future__ import annotations

from infra import naming
from infra.config import SampleJobSettings, Settings
from training import log_format

API_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"
CONTAINER = "pytorch"
SERVICE_ACCOUNT = "sample-job"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
# A world-writable (sticky) folder on the instance's NVMe, made by on_create.sh, and where
# it appears in pods: the job runs as a non-root user.
NODE_LOCAL = "/opt/sagemaker/jobs"
LOCAL_MOUNT = "/local"
SEQ_LEN = {"llama3.1-8b": 8192, "tiny": 256}
# Log rules (seconds): loss must first appear within JOB_START, then keep coming; a
# checkpoint must follow the previous one within CHECKPOINT_CADENCE.
# The image's user (training/Dockerfile): a high UID that exists on no node.
RUN_AS_UID = 10001
JOB_START_S = 240
HANG_S = 300
CHECKPOINT_CADENCE_S = 600


# Deliberate deviations from checkov's Kubernetes checks, as checkov reads them (pod annotations).
CHECKOV_SKIPS = {
    "checkov.io/skip1": "CKV_K8S_8=Liveness is judged by the operator's log rules (JobHangingDetection) and the "
    "HyperPod health agent; a probe that restarts one rank breaks the collective of all ranks",
    "checkov.io/skip2": "CKV_K8S_9=Training pods serve no traffic; readiness gates nothing",
    "checkov.io/skip3": "CKV_K8S_43=The CDK image asset is tagged with its content hash, which pins the image like a digest",
}


def log_rules() -> list[dict]:
    return [
        {
            "name": "JobStart",
            "logPattern": log_format.LOSS_PATTERN,
            "expectedStartCutOffInSeconds": JOB_START_S,
        },
        {
            # Training that stops printing batches is hanging (or its loss went NaN).
            "name": "JobHangingDetection",
            "logPattern": log_format.LOSS_VALUE_PATTERN,
            "expectedRecurringFrequencyInSeconds": HANG_S,
        },
        {
            "name": "CheckpointCadence",
            "logPattern": log_format.CHECKPOINT_PATTERN,
            "expectedRecurringFrequencyInSeconds": CHECKPOINT_CADENCE_S,
        },
    ]


def _labels(settings: Settings, job: SampleJobSettings) -> dict:
    labels = {"app.kubernetes.io/name": job.name, "app.kubernetes.io/part-of": "hyperpod-cdk"}
    if job.team:
        labels["kueue.x-k8s.io/queue-name"] = naming.team_names(job.team).local_queue
    if job.priority:
        labels["kueue.x-k8s.io/priority-class"] = naming.priority_class_name(job.priority)
    return labels


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
    return [
        "hyperpodrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={gpus}",
        "--server-host=0.0.0.0",
        "--server-port=8080",
        "--tee=3",
        "--log_dir=/tmp/hyperpod",
        "/workspace/train.py",
        f"--model={job.model}",
        f"--tokenizer={job.tokenizer}",
        f"--dataset={job.dataset.name}",
        *([f"--dataset-config={job.dataset.config}"] if job.dataset.config else []),
        f"--dataset-split={job.dataset.split}",
        f"--seq-len={SEQ_LEN[job.model]}",
        f"--max-steps={job.max_steps}",
        f"--checkpoint-dir={checkpoint_uri}",
        f"--checkpoint-interval={job.checkpoint_interval_steps}",
    ]


def build(settings: Settings, *, image: str, checkpoint_uri: str | None = None) -> dict:
    """The HyperPodPyTorchJob object. Call with validated settings (config.check)."""
    job = settings.sample_job
    group = settings.instance_group(job.instance_group)
    spec = group.spec
    gpus, efa = spec.accelerators, spec.efa_interfaces
    labels = _labels(settings, job)
    checkpoint_uri = checkpoint_uri or f"{LOCAL_MOUNT}/checkpoints/{job.name}"
    resources = {spec.accelerator_resource: gpus}
    if efa:
        resources["vpc.amazonaws.com/efa"] = efa
    env = [
        {"name": "FI_PROVIDER", "value": "efa"},
        {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
        {"name": "FI_EFA_FORK_SAFE", "value": "1"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "^lo,docker"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "1"},
        {"name": "HF_HOME", "value": f"{LOCAL_MOUNT}/hf-cache"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if job.hf_token_secret:
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": job.hf_token_secret, "key": "token"}}}
        )
    # Most of the node goes to the job; the rest stays for kubelet and the HyperPod agents.
    resources["cpu"] = str(int(spec.vcpus * 0.9))
    resources["memory"] = f"{int(spec.memory_gib * 0.85)}Gi"
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "Always",
        "command": _command(settings, job.nodes, gpus, checkpoint_uri),
        "env": env,
        "ports": [{"containerPort": 8080, "name": "agent"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "local", "mountPath": LOCAL_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        # EFA and NCCL need no Linux capabilities: the device plugin hands over the devices.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": HEALTH_LABEL, "operator": "In", "values": ["Schedulable"]},
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [spec.name]},
                        ]
                    }
                ]
            }
        }
    }
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
        "containers": [container],
        "volumes": [
            # NCCL and the data loader need far more shared memory than the 64 MiB default.
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{max(8, spec.memory_gib // 4)}Gi"}},
            {"name": "local", "hostPath": {"path": NODE_LOCAL, "type": "DirectoryOrCreate"}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    tolerations = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in group.taints]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    template_metadata = {"labels": dict(labels), "annotations": {**_topology_annotations(settings), **CHECKOV_SKIPS}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job.name, "namespace": namespace(settings), "labels": labels},
        "spec": {
            "nprocPerNode": str(gpus),
            "replicaSpecs": [
                {"name": "pods", "replicas": job.nodes, "spares": 0, "template": {"metadata": template_metadata, "spec": pod_spec}}
            ],
            "runPolicy": {
                "jobMaxRetryCount": 10,
                "cleanPodPolicy": "None",
                "ttlSecondsAfterFinished": 3600,
                # Restart only the failed pods first; a full job restart after three of those
                # within six hours.
                "restartPolicy": {"numRestartBeforeFullJobRestart": 3, "evalPeriodSeconds": 21600, "maxFullJobRestarts": 2},
                "logMonitoringConfiguration": log_rules(),
            },
        },
    }


def network_policy(settings: Settings) -> dict:
    """Ingress only from the job's own pods (rendezvous and NCCL); egress stays open for
    S3 checkpoints and the dataset. Enforced where the VPC CNI's network policy is on."""
    name = settings.sample_job.name
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace(settings), "labels": {"app.kubernetes.io/part-of": "hyperpod-cdk"}},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": name}}}]}],
        },
    }


def objects(settings: Settings, *, image: str, checkpoint_uri: str | None = None) -> list[dict]:
    """Everything the job needs, in apply order."""
    return [service_account(settings), network_policy(settings), build(settings, image=image, checkpoint_uri=checkpoint_uri)]


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
