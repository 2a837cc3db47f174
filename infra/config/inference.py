"""Serving: the HyperPod inference operator (an EKS add-on since Inference Operator 3.0) and the
endpoint that serves the sample job's model, under the same task governance as training.

Off by default: an environment without `inference.enabled` builds nothing of it."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from infra.config.addons import AddonSwitch
from infra.config.base import Model

# The EKS add-on (HyperPod model deployment setup page; the quick setup's
# inference-operator-addon-template.yaml, ADDON_NAME).
INFERENCE_ADDON_NAME = "amazon-sagemaker-hyperpod-inference"


class EndpointSettings(Model):
    """The endpoint serving the sample job's model (`render-endpoint`), and what admission
    judges before deploy: its replicas against its team's quota."""

    name: str = Field(
        default="llama3-1-8b-serving", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="The endpoint's name (a Kubernetes object name, also its SageMaker endpoint's).",
    )
    team: Optional[str] = Field(
        default=None,
        description="The serving team (a `governance.teams` name) whose queue and quota the replicas take; unset: the sample job's team.",
    )
    priority: str = Field(
        default="inference",
        description="Its priority class (a `governance.priority_classes` name), above the sample job's so serving preempts training "
        "(the HyperPod page \"Task governance for model deployment\").",
    )
    instance_group: Optional[str] = Field(default=None, description="The instance group it runs on; unset: the sample job's.")
    replicas: int = Field(default=1, ge=1, le=100, description="Replicas; their team must be able to hold all of them at once.")
    gpus_per_replica: int = Field(default=1, ge=1, le=64, description="GPUs (accelerators) each replica asks for, at most a node's.")
    image_uri: Optional[str] = Field(
        default=None,
        description="The model server's image (an OpenAI-compatible server such as vLLM, listening on `port`); `render-endpoint "
        "--image` gives it where unset.",
    )
    port: int = Field(default=8000, ge=1, le=65535, description="The port the model server listens on; the serving team's "
                      "namespace admits it from any address, for the endpoint's load balancer, and nothing else beside tenancy's rules.")
    invocation_path: str = Field(
        default="v1/completions", pattern=r"^[A-Za-z0-9._/-]+$",
        description="The server's invocation path after `http://<host>:<port>/` (the operator's `invocationEndpoint`).",
    )


class InferenceSettings(AddonSwitch):
    enabled: bool = Field(
        default=False,
        description="Install the inference operator add-on with what it needs beside it (its roles, the TLS certificate bucket, the "
        "FSx and Mountpoint S3 CSI drivers, metrics-server; cert-manager is the training operator's).",
    )
    endpoint: EndpointSettings = Field(default=EndpointSettings(), description="The endpoint serving the sample job's model.")
