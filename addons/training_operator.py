"""HyperPod training operator (`amazon-sagemaker-hyperpod-training-operator`): runs
HyperPodPyTorchJobs with log-based hang and fault detection and partial restarts."""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon, ReadyWhen
from addons.cert_manager import CertManagerAddon
from addons.pod_identity_agent import PodIdentityAgentAddon
from addons.task_governance import TaskGovernanceAddon
from infra import lazy
from infra.config import EKS_ADDON_NAMES

compliance = lazy.module("infra.compliance")
pod_identity = lazy.module("infra.pod_identity")

NAMESPACE = "aws-hyperpod"
SERVICE_ACCOUNT = "hp-training-operator-controller-manager"
MANAGED_POLICY = "AmazonSageMakerHyperPodTrainingOperatorAccess"


class TrainingOperatorAddon(ManagedAddon):
    key = "training_operator"
    title = "HyperPod training operator"
    eks_name = EKS_ADDON_NAMES["training_operator"]
    # The job is a HyperPodPyTorchJob: its type must be served before the job is applied.
    # (The operator's deployment name is not documented; the CRD's is, in FACTS and the
    # official CRD models: plural hyperpodpytorchjobs, group sagemaker.amazonaws.com.)
    ready_when = ReadyWhen.crd_established("hyperpodpytorchjobs.sagemaker.amazonaws.com")
    # And its controller running: a served CRD with no controller takes the job and runs nothing.
    # Found by the service account AWS's docs associate its Pod Identity role with.
    also_ready_when = (ReadyWhen.pod_ready_as(NAMESPACE, SERVICE_ACCOUNT),)
    requires = (CertManagerAddon, PodIdentityAgentAddon)
    # Not a requirement, but when task governance is on it must be there first: the
    # operator refuses a task governance older than v1.3.0 it finds at start.
    after = (TaskGovernanceAddon,)

    def prerequisites(self, ctx: AddonContext):
        identity = pod_identity.pod_identity_role(
            ctx.scope,
            ctx.cluster,
            "TrainingOperator",
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            description="HyperPod training operator controller (Pod Identity)",
            managed_policies=(MANAGED_POLICY,),
        )
        compliance.acknowledge(
            identity.role,
            "The training operator add-on documents the AWS-managed AmazonSageMakerHyperPodTrainingOperatorAccess "
            "policy as its required permissions",
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{MANAGED_POLICY}]",
        )
        return [identity.association]
