"""Readiness gates: waits with a timeout, placed in the graph right before what needs them.

- `HyperPodNodesReady`: after the HyperPod cluster, every instance group has its nodes
  Running (asks the SageMaker API; with continuous provisioning the cluster reports done
  before any node exists).
- `AcceleratorsReady`: after that, every accelerated group's nodes can run training: Ready,
  Schedulable, and their accelerators (and EFA devices) allocatable (asks the EKS API from
  inside the VPC).
- `kubernetes_ready`: an object in the cluster has a value at a JSON path (a deployment has
  available replicas, a namespace is Active), through the cluster's kubectl provider. On
  timeout it fails with the kubectl command that shows the object.

The first two are chained waits (`ChainedWait`): however long they may take, each link is a
custom resource that answers CloudFormation inside its service timeout (infra/timing.py).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra import compliance, timing

HANDLERS = Path(__file__).parent / "handlers"
# The Kubernetes group the accelerator gate's access entry maps its role to; RBAC below lets
# it list nodes and nothing else.
NODE_READERS = "hyperpod-cdk-node-readers"


class ChainedWait(Construct):
    """A wait of `total_minutes` as a chain of custom resources (timing.links), one provider
    for all of them. Each link's own deadline comes first, then the provider framework's,
    then CloudFormation's service timeout, which every link sets explicitly. Dependents
    wait for the whole construct (every link)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        handler: str,
        resource_type: str,
        properties: dict,
        total_minutes: float,
        description: str,
        why_these_functions: str,
        is_complete_options: dict | None = None,
    ):
        """`why_these_functions`: for the nag acknowledgment of the provider's Lambdas, what
        they do and why they run where they do."""
        super().__init__(scope, id_)
        code = lambda_.Code.from_asset(str(HANDLERS))
        runtime = lambda_.Runtime.PYTHON_3_12
        # The timeouts and retries that keep every call inside the function's time.
        environment = timing.handler_environment()
        self.on_event = lambda_.Function(
            self, "OnEvent", runtime=runtime, code=code, handler=f"{handler}.on_event", environment=environment,
            timeout=cdk.Duration.seconds(timing.ON_EVENT_TIMEOUT_S), description=f"Readiness gate: starts the wait ({description})",
        )
        self.is_complete = lambda_.Function(
            self, "IsComplete", runtime=runtime, code=code, handler=f"{handler}.is_complete", environment=environment,
            timeout=cdk.Duration.seconds(timing.IS_COMPLETE_TIMEOUT_S), description=f"Readiness gate: {description}?",
            **(is_complete_options or {}),
        )
        provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.on_event,
            is_complete_handler=self.is_complete,
            query_interval=cdk.Duration.seconds(timing.POLL_INTERVAL_S),
            total_timeout=cdk.Duration.seconds(timing.LINK_PROVIDER_TIMEOUT_S),
        )
        self.links: list[cdk.CustomResource] = []
        for link in timing.links(total_minutes):
            resource = cdk.CustomResource(
                self,
                # The first link keeps the id a single gate had, so nothing is replaced by the split.
                "Resource" if link.index == 1 else f"Link{link.index}",
                service_token=provider.service_token,
                resource_type=resource_type,
                service_timeout=cdk.Duration.seconds(timing.LINK_SERVICE_TIMEOUT_S),
                properties={
                    "Region": cdk.Stack.of(self).region,
                    **properties,
                    "Link": f"{link.index}/{link.count}",
                    "LinkSeconds": str(link.seconds),
                    "TotalSeconds": str(link.seconds * link.count),
                },
            )
            if self.links:
                resource.node.add_dependency(self.links[-1])
            self.links.append(resource)
        for function in (self.on_event, self.is_complete):
            in_vpc = function is self.is_complete and "vpc" in (is_complete_options or {})
            compliance.checkov_skip(
                function.node.default_child,
                CKV_AWS_115="Readiness gate invoked only by CloudFormation during deploys; reserved concurrency "
                "would fail in accounts whose limit leaves no room to reserve",
                CKV_AWS_116="CloudFormation receives every failure with its reason; a DLQ would never be read",
                **({} if in_vpc else {"CKV_AWS_117": "It calls only AWS APIs (SageMaker), which need no VPC"}),
                CKV_AWS_173="The environment holds only the SDK timeouts and retry count, nothing secret",
            )
        compliance.acknowledge_provider(self, why_these_functions)


class HyperPodNodesReady(ChainedWait):
    """Completes when each instance group of `cluster_name` has its configured count Running."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: cdk.CfnResource,
        cluster_name: str,
        groups: dict[str, int],
        node_specs: dict[str, dict],
        total_minutes: float,
    ):
        """`node_specs`: per group, what of it rolls or replaces its nodes (stacks/hyperpod.py
        node_spec). The check never reads it: a change to it makes the gate wait again."""
        stack = cdk.Stack.of(scope)
        super().__init__(
            scope,
            id_,
            handler="hyperpod_nodes",
            resource_type="Custom::HyperPodNodesReady",
            properties={
                "ClusterName": cluster_name,
                "InstanceGroups": {name: str(count) for name, count in groups.items()},
                "NodeSpecs": node_specs,
            },
            total_minutes=total_minutes,
            description="are the HyperPod nodes Running",
            why_these_functions="a readiness gate that polls ListClusterNodes; its handlers run outside the VPC because "
            "they call only the SageMaker API",
        )
        # HyperPod cluster ARNs end in an id known only after creation. Scoped to this
        # account's clusters by pattern, the gate's Lambdas and provider are created while the
        # cluster is, not after it; the action only lists nodes.
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(
                actions=["sagemaker:ListClusterNodes"],
                resources=[f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:cluster/*"],
            )
        )
        # The name comes from config, so nothing else orders the wait after the cluster's
        # creation; without this it could ask ListClusterNodes before the cluster exists.
        self.links[0].node.add_dependency(cluster)
        compliance.acknowledge(
            self.is_complete,
            "ListClusterNodes only reads; a HyperPod cluster's ARN ends in an id assigned at creation, and "
            "naming it would hold the gate's Lambdas back until the cluster exists",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:sagemaker:{stack.region}:{stack.account}:cluster/*]",
        )


class AcceleratorsReady(ChainedWait):
    """Completes when each group in `groups` (name -> (count, {resource: per node})) has that
    many nodes that are Ready, Schedulable and advertise those resources as allocatable;
    waits again whenever `node_specs` changes (a node roll)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        groups: dict[str, tuple[int, dict[str, int]]],
        node_specs: dict[str, dict],
        subnets: list[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        vpc: ec2.IVpc,
    ):
        super().__init__(
            scope,
            id_,
            handler="accelerators",
            resource_type="Custom::HyperPodAcceleratorsReady",
            properties={
                "ClusterName": cluster.cluster_name,
                # An existing cluster is imported by name: the check asks DescribeCluster.
                **(
                    {"Endpoint": cluster.cluster_endpoint, "CertificateAuthority": cluster.cluster_certificate_authority_data}
                    if isinstance(cluster, eks.Cluster)
                    else {}
                ),
                "Groups": {
                    name: {"Count": str(count), "Resources": {r: str(n) for r, n in sorted(resources.items())}}
                    for name, (count, resources) in sorted(groups.items())
                },
                # Read by no check: a node roll makes the gate wait again (HyperPodNodesReady).
                "NodeSpecs": node_specs,
            },
            total_minutes=timing.ACCELERATOR_WAIT_MINUTES,
            description="can the accelerated nodes run training",
            why_these_functions="a readiness gate that lists nodes through the EKS API; its check runs inside the VPC "
            "(the endpoint may be private) and its start handler outside it, calling nothing",
            # The API endpoint may be private (prod): the check runs where the nodes do.
            is_complete_options={
                "vpc": vpc,
                "vpc_subnets": ec2.SubnetSelection(subnets=subnets),
                "security_groups": [security_group],
            },
        )
        if not isinstance(cluster, eks.Cluster):
            self.is_complete.add_to_role_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn]))
        # An access entry maps the check's role to a Kubernetes group that may list nodes:
        # no EKS access policy (the narrowest, AmazonEKSViewPolicy, cannot read nodes).
        access = eks.CfnAccessEntry(
            self,
            "Access",
            cluster_name=cluster.cluster_name,
            principal_arn=self.is_complete.role.role_arn,
            kubernetes_groups=[NODE_READERS],
            type="STANDARD",
        )
        rbac = eks.KubernetesManifest(self, "NodeReaders", cluster=cluster, manifest=node_reader_rbac())
        for link in self.links:
            link.node.add_dependency(access, rbac)
        compliance.acknowledge(
            self.is_complete,
            "Lambda in a VPC needs the AWS-managed AWSLambdaVPCAccessExecutionRole to manage its network interfaces; "
            "in the cluster it may only get and list nodes (its access entry's group)",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]",
        )


def node_reader_rbac() -> list[dict]:
    """A ClusterRole that may get and list nodes, bound to NODE_READERS."""
    name = NODE_READERS
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}],
        },
    ]


def kubernetes_ready(
    scope: Construct, id_: str, *, cluster: eks.ICluster, kind: str, name: str, namespace: str, json_path: str, minutes: int
) -> eks.KubernetesObjectValue:
    """Waits until `kubectl get -n namespace kind name -o jsonpath={json_path}` prints something.
    The kubectl provider's Lambda runs at most 15 minutes, hence the cap."""
    if not 1 <= minutes <= timing.KUBECTL_WAIT_MAX_MINUTES:
        raise ValueError(f"{id_}: a kubectl wait can last 1 to {timing.KUBECTL_WAIT_MAX_MINUTES} minutes, not {minutes}")
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
