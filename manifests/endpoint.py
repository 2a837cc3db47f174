"""The endpoint serving the sample job's model: the inference operator's own custom resource,
`InferenceEndpointConfig` (apiVersion inference.sagemaker.aws.amazon.com/v1), as plain data.

Its fields are the official model's (PyPI `sagemaker-hyperpod`,
`sagemaker/hyperpod/inference/config/hp_endpoint_config.py`, `_HPEndpoint`; tests/manifests hold
the spec to it). The model is where the job leaves it, converted for serving: the job writes
sharded torch.distributed.checkpoint directories, which no model server loads, so
`python -m training.export_hf` (docs/serving.md) writes the newest one as Hugging Face
safetensors beside them, under `serving/`, and the endpoint loads that."""

from __future__ import annotations

from infra import admission, naming
from infra.config.settings import Settings
from manifests import job as job_manifest
from manifests import tenancy

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
KIND = "InferenceEndpointConfig"
# Where the operator mounts the model in the server's container (ModelVolumeMount's default).
MODEL_MOUNT = "/opt/ml/model"
SERVING_DIR = "serving"


def namespace(settings: Settings) -> str:
    team = team_of(settings)
    return naming.team_names(team).namespace if team else "default"


def team_of(settings: Settings) -> str | None:
    return settings.inference.endpoint.team or settings.sample_job.team


def opening(settings: Settings) -> dict | None:
    """The serving namespace's one opening beside tenancy's default deny (manifests/tenancy.py
    endpoint_policy), where the stacks make it: serving on, its endpoint in a team's namespace. An
    endpoint of no team serves from `default`, which has no default deny to open."""
    team = team_of(settings)
    if not settings.inference.enabled or team not in {t.name for t in settings.governance.teams}:
        return None
    ep = settings.inference.endpoint
    return tenancy.endpoint_policy(team, ep.name, ep.port)


def model_location(settings: Settings) -> str:
    """The converted model, beside the job's checkpoints: a key prefix of the checkpoint bucket,
    or a path of the file system from its root (each team's directory is its namespace's)."""
    job = settings.sample_job
    if job.checkpoint_to == "s3":
        return f"{job.name}/{SERVING_DIR}"
    team_dir = f"{job_manifest.namespace(settings)}/" if settings.governance.teams else ""
    return f"{team_dir}checkpoints/{job.name}/{SERVING_DIR}"


def model_uri(settings: Settings) -> str:
    """Where `training.export_hf` writes the model, as the job's pods see the storage."""
    if settings.sample_job.checkpoint_to == "s3":
        return f"s3://{settings.checkpoint_bucket_name}/{model_location(settings)}"
    return f"{job_manifest.checkpoint_uri(settings)}/{SERVING_DIR}"


def _source(settings: Settings) -> dict:
    if settings.sample_job.checkpoint_to == "s3":
        return {"modelSourceType": "s3", "s3Storage": {"bucketName": settings.checkpoint_bucket_name, "region": settings.region},
                "modelLocation": model_location(settings)}
    return {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": settings.fsx.existing.file_system_id},
            "modelLocation": model_location(settings)}


def objects(settings: Settings, *, image: str) -> list[dict]:
    """The InferenceEndpointConfig, in its team's namespace, queued and prioritised as the jobs are."""
    ep = settings.inference.endpoint
    group = settings.instance_group(ep.instance_group or settings.sample_job.instance_group)
    requests = admission.replica_requests(group, ep.gpus_per_replica)  # what admission judged
    resources = {k: (f"{v}Gi" if k == "memory" else v) for k, v in requests.items()}
    labels = {"app.kubernetes.io/name": ep.name, "app.kubernetes.io/part-of": "hyperpod-cdk"}
    team = team_of(settings)
    if team:
        labels["kueue.x-k8s.io/queue-name"] = naming.team_names(team).local_queue
        labels["kueue.x-k8s.io/priority-class"] = naming.priority_class_name(ep.priority)
    spec = {
        "modelName": ep.name,
        "endpointName": ep.name,
        "instanceType": group.instance_type,
        "replicas": ep.replicas,
        "invocationEndpoint": ep.invocation_path,
        "modelSourceConfig": _source(settings),
        "worker": {
            "image": image,
            "args": ["--model", MODEL_MOUNT, "--port", str(ep.port), "--served-model-name", ep.name],
            "modelInvocationPort": {"containerPort": ep.port, "name": "http"},
            "modelVolumeMount": {"name": "model-weights", "mountPath": MODEL_MOUNT},
            "resources": {"requests": resources, "limits": resources},
        },
    }
    return [{"apiVersion": API_VERSION, "kind": KIND,
             "metadata": {"name": ep.name, "namespace": namespace(settings), "labels": labels}, "spec": spec}]
