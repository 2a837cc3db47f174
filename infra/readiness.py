"""Readiness gates: waits with a timeout, placed in the graph right before what needs them.

- `HyperPodNodesReady`: after the HyperPod cluster, every instance group has its nodes
  Running (asks the SageMaker API; with continuous provisioning the cluster reports done
  before any node exists).
- `kubernetes_ready`: an object in the cluster has a value at a JSON path (a deployment has
  available replicas, a namespace is Active), through the cluster's kubectl provider. On
  timeout it fails with the kubectl command that shows the object.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra import compliance

HANDLERS = Path(__file__).parent / "handlers"
# The provider framework's ceiling is 2 hours; our own deadline comes first so the failure
# names the groups that are short instead of CloudFormation's "Operation timed out". Deep
# health checks alone take 60-90 minutes (HyperPod's NodeClass page) after a p5 boots (~20).
NODE_WAIT = cdk.Duration.minutes(115)
PROVIDER_TIMEOUT = cdk.Duration.hours(2)


class HyperPodNodesReady(Construct):
    """Completes when each instance group of `cluster_name` has its configured count Running."""

    def __init__(self, scope: Construct, id_: str, *, cluster: cdk.CfnResource, cluster_name: str, groups: dict[str, int]):
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        code = lambda_.Code.from_asset(str(HANDLERS))
        runtime = lambda_.Runtime.PYTHON_3_12
        on_event = lambda_.Function(
            self, "OnEvent", runtime=runtime, code=code, handler="hyperpod_nodes.on_event",
            timeout=cdk.Duration.seconds(30), description="Readiness gate: starts the wait for HyperPod nodes",
        )
        is_complete = lambda_.Function(
            self, "IsComplete", runtime=runtime, code=code, handler="hyperpod_nodes.is_complete",
            timeout=cdk.Duration.minutes(1), description="Readiness gate: are the HyperPod nodes Running?",
        )
        # HyperPod cluster ARNs end in an id known only after creation. Scoped to this
        # account's clusters by pattern, the gate's Lambdas and provider are created while the
        # cluster is, not after it; the action only lists nodes.
        is_complete.add_to_role_policy(
            iam.PolicyStatement(
                actions=["sagemaker:ListClusterNodes"],
                resources=[f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:cluster/*"],
            )
        )
        provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=on_event,
            is_complete_handler=is_complete,
            query_interval=cdk.Duration.minutes(1),
            total_timeout=PROVIDER_TIMEOUT,
        )
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type="Custom::HyperPodNodesReady",
            properties={
                "ClusterName": cluster_name,
                "Region": stack.region,
                "InstanceGroups": {name: str(count) for name, count in groups.items()},
                "TimeoutSeconds": str(int(NODE_WAIT.to_seconds())),
            },
        )
        # The name comes from config, so nothing else orders the wait after the cluster's
        # creation; without this it could ask ListClusterNodes before the cluster exists.
        self.resource.node.add_dependency(cluster)
        for function in (on_event, is_complete):
            compliance.checkov_skip(
                function.node.default_child,
                CKV_AWS_115="Readiness gate invoked only by CloudFormation during deploys; reserved concurrency "
                "would fail in accounts whose limit leaves no room to reserve",
                CKV_AWS_116="CloudFormation receives every failure with its reason; a DLQ would never be read",
                CKV_AWS_117="It calls only the SageMaker API (ListClusterNodes), which needs no VPC",
                CKV_AWS_173="No environment variables are set: there is nothing to encrypt",
            )
        compliance.acknowledge_provider(self, "a readiness gate that polls ListClusterNodes")
        compliance.acknowledge(
            is_complete,
            "ListClusterNodes only reads; a HyperPod cluster's ARN ends in an id assigned at creation, and "
            "naming it would hold the gate's Lambdas back until the cluster exists",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:sagemaker:{stack.region}:{stack.account}:cluster/*]",
        )


def kubernetes_ready(
    scope: Construct, id_: str, *, cluster: eks.ICluster, kind: str, name: str, namespace: str, json_path: str, minutes: int
) -> eks.KubernetesObjectValue:
    """Waits until `kubectl get -n namespace kind name -o jsonpath={json_path}` prints something.
    The kubectl provider's Lambda runs at most 15 minutes, hence the cap."""
    if not 1 <= minutes <= 14:
        raise ValueError(f"{id_}: a kubectl wait can last 1 to 14 minutes, not {minutes}")
    return eks.KubernetesObjectValue(
        scope,
        id_,
        cluster=cluster,
        object_type=kind,
        object_name=name,
        object_namespace=namespace,
        json_path=json_path,
        timeout=cdk.Duration.minutes(minutes),
    )
