"""`<prefix>-<env>-hyperpod`: the SageMaker HyperPod cluster and what must exist before it.

Order inside the stack: the nodes' execution role, then the `AWS::SageMaker::Cluster` with
one instance group per config entry (after the dependencies chart and the lifecycle scripts
the cluster stack installs), then the gate that waits for its nodes.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from infra import compliance, readiness
from infra.config import InstanceGroup, Settings
from infra.stack import PlatformStack
from stacks.cluster import ClusterStack
from stacks.lifecycle import ON_CREATE
from stacks.network import NetworkStack

INSTANCE_ROLE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
# EC2 has no resource-level scoping for these.
NETWORK_DESCRIBE_ACTIONS = (
    "DescribeDhcpOptions",
    "DescribeInstances",
    "DescribeInstanceTypes",
    "DescribeNetworkInterfaces",
    "DescribeSecurityGroups",
    "DescribeSubnets",
    "DescribeTags",
    "DescribeVpcs",
)
# HyperPod's and the VPC CNI's network interfaces in the customer VPC.
NETWORK_INTERFACE_ACTIONS = (
    "AssignPrivateIpAddresses",
    "CreateNetworkInterface",
    "CreateNetworkInterfacePermission",
    "DeleteNetworkInterface",
    "DeleteNetworkInterfacePermission",
    "DetachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "UnassignPrivateIpAddresses",
)


class HyperPodStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings, network: NetworkStack, cluster: ClusterStack):
        super().__init__(scope, "hyperpod", settings=settings, description="SageMaker HyperPod cluster on EKS")
        self.network = network
        self.eks_cluster = cluster.cluster
        self.lifecycle_uri = cluster.lifecycle_uri
        self.bucket_key = cluster.bucket_key
        self.execution_role = self._execution_role()
        self.cluster = self._hyperpod_cluster()
        # Nodes boot with the chart's device plugins and health agents already in place
        # (the cluster stack installs them), and find their lifecycle scripts in S3.
        self.cluster.node.add_dependency(cluster.dependencies_chart, cluster.lifecycle_scripts)
        # Both references tag the cluster so; AWS-managed HyperPod policies key on it.
        cdk.Tags.of(self.cluster).add("SageMaker", "true")
        # What needs nodes (every later stack) waits for this, not for the cluster resource.
        self.nodes_ready = readiness.HyperPodNodesReady(
            self,
            "NodesReady",
            cluster=self.cluster,
            cluster_name=settings.hyperpod_cluster_name,
            groups={g.name: g.count for g in settings.hyperpod.instance_groups},
        )

        cdk.CfnOutput(self, "HyperPodClusterName", value=settings.hyperpod_cluster_name)
        cdk.CfnOutput(self, "HyperPodClusterArn", value=self.cluster.attr_cluster_arn)
        cdk.CfnOutput(self, "EksClusterName", value=settings.eks_cluster_name)
        cdk.CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {settings.region} --name {settings.eks_cluster_name}",
        )

    # ------------------------------------------------------------------ execution role

    def _execution_role(self) -> iam.Role:
        """What both AWS reference templates grant an instance group (the quick setup's
        sagemaker-iam-role-template.yaml; awsome's sagemaker-iam-role-stack.yaml). The managed
        policy alone has no ECR or EC2 network-interface actions."""
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="HyperPod instance groups: node bootstrap, VPC CNI, image pulls, Pod Identity",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_ROLE_POLICY)],
        )
        arn = f"arn:{self.partition}:ec2:{self.region}:{self.account}"
        network = self.network
        # The references scope network interfaces to the VPC, its subnets and security group
        # by ID; so do we, with only the HyperPod subnets and our one group.
        placed_in = [
            f"{arn}:vpc/{network.vpc.vpc_id}",
            *(f"{arn}:subnet/{subnet.subnet_id}" for subnet in network.hyperpod_subnets),
            f"{arn}:security-group/{network.efa_security_group.security_group_id}",
        ]
        statements = [
            iam.PolicyStatement(
                sid="NetworkDescribe",
                actions=[f"ec2:{a}" for a in NETWORK_DESCRIBE_ACTIONS],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="NetworkInterfaces",
                actions=[f"ec2:{a}" for a in NETWORK_INTERFACE_ACTIONS],
                resources=[f"{arn}:network-interface/*", f"{arn}:instance/*", *placed_in],
            ),
            iam.PolicyStatement(
                sid="NetworkInterfaceAttach",
                actions=["ec2:AttachNetworkInterface"],
                resources=[f"{arn}:network-interface/*", f"{arn}:instance/*"],
            ),
            iam.PolicyStatement(sid="NetworkInterfaceTags", actions=["ec2:CreateTags"], resources=[f"{arn}:network-interface/*"]),
            # The EKS add-ons (vpc-cni, kube-proxy, coredns, Pod Identity agent), the HyperPod
            # health agent and the other add-ons pull from AWS-owned accounts' repositories:
            # a grant scoped to this account leaves nodes in ImagePullBackOff, never Ready.
            iam.PolicyStatement(
                sid="ImagePull",
                actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:GetAuthorizationToken"],
                resources=["*"],
            ),
            iam.PolicyStatement(sid="HealthAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"]),
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[self.eks_cluster.cluster_arn],
            ),
        ]
        policy = iam.ManagedPolicy(self, "ExecutionPolicy", statements=statements, roles=[role])
        # By its fixed name, so the grant (and its acknowledgment below) reads the same in every
        # synth rather than naming the cluster stack's export.
        scripts_bucket = s3.Bucket.from_bucket_name(self, "LifecycleScriptsBucket", self.settings.lifecycle_bucket_name)
        scripts_bucket.grant_read(policy, "lifecycle/*")
        self.bucket_key.grant_decrypt(policy)
        compliance.acknowledge(
            role,
            "HyperPod requires the AWS-managed AmazonSageMakerClusterInstanceRolePolicy on instance-group roles",
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{INSTANCE_ROLE_POLICY}]",
        )
        compliance.acknowledge(
            policy,
            "Node needs, as both AWS reference templates grant them: EC2 Describe*, cloudwatch:DescribeAlarms and "
            "ecr:GetAuthorizationToken support no resource scoping; images come from AWS-owned accounts' "
            "repositories (EKS add-ons, HyperPod agents) as well as ours; the VPC CNI creates ENIs at run time "
            "(ids unknown); lifecycle scripts are read from a versioned prefix of our bucket",
            "AwsSolutions-IAM5[Resource::*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:ec2:{self.region}:{self.account}:network-interface/*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:ec2:{self.region}:{self.account}:instance/*]",
            "AwsSolutions-IAM5[Action::s3:GetBucket*]",
            "AwsSolutions-IAM5[Action::s3:GetObject*]",
            "AwsSolutions-IAM5[Action::s3:List*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:s3:::{self.settings.lifecycle_bucket_name}/lifecycle/*]",
        )
        return role

    # ------------------------------------------------------------------ cluster

    def _instance_group(self, group: InstanceGroup) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        override = None
        if group.availability_zone and group.availability_zone != self._default_subnet.availability_zone:
            override = sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[self.network.efa_security_group.security_group_id],
                subnets=[self.network.hyperpod_subnet_by_az[group.availability_zone].subnet_id],
            )
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=self.lifecycle_uri, on_create=ON_CREATE
            ),
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(volume_size_in_gb=group.ebs_volume_gb)
                )
            ],
            on_start_deep_health_checks=list(group.health_checks) or None,
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(
                labels=dict(group.labels) or None,
                taints=[
                    sagemaker.CfnCluster.ClusterKubernetesTaintProperty(key=t.key, value=t.value, effect=t.effect)
                    for t in group.taints
                ]
                or None,
            )
            if group.labels or group.taints
            else None,
            training_plan_arn=group.training_plan_arn,
            override_vpc_config=override,
        )

    @property
    def _default_subnet(self):
        return self.network.hyperpod_subnets[0]

    def _hyperpod_cluster(self) -> sagemaker.CfnCluster:
        hp = self.settings.hyperpod
        return sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=self.settings.hyperpod_cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=self.eks_cluster.cluster_arn)
            ),
            node_recovery=hp.node_recovery,
            node_provisioning_mode="Continuous" if hp.continuous_provisioning else None,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[self.network.efa_security_group.security_group_id],
                subnets=[self._default_subnet.subnet_id],
            ),
            instance_groups=[self._instance_group(g) for g in hp.instance_groups],
        )
