"""`<prefix>-<env>-cluster`: the EKS control plane HyperPod orchestrates through, with what
must be in it before any node: the core add-ons and the HyperPod dependencies chart, and
the lifecycle scripts the nodes run at boot.

With eks.existing_cluster the control plane is not created but imported, and only what
HyperPod needs goes onto it (see `_existing_cluster`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct, IConstruct

from addons.base import overwrite_conflicts
from infra import catalogue, chart, compliance, hyperpod_chart, naming, versions
from infra.checks.eks import vpc_cni_configuration
from infra.config import CoreAddon, Settings, deep_merge
from infra.stack import PlatformStack
from stacks import lifecycle, storage
from stacks.network import NetworkStack


UNPREPARED_CHART = Path(__file__).parent / "hyperpod_chart_unprepared"


def kubectl_layer(scope: Construct, version: str):
    module, cls, _ = versions.kubectl_layer_module(version)
    return getattr(importlib.import_module(module), cls)(scope, "KubectlLayer")


def _endpoint_access(settings: Settings) -> eks.EndpointAccess:
    """Validation leaves a public-only endpoint open to all (CDK refuses to restrict one
    without private access), and gives the others their CIDRs."""
    if settings.eks.endpoint_access == "private":
        return eks.EndpointAccess.PRIVATE
    if settings.eks.endpoint_access == "public":
        return eks.EndpointAccess.PUBLIC
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*(str(c) for c in settings.eks.public_access_cidrs))


class ClusterStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings, network: NetworkStack):
        existing = settings.uses_existing_cluster
        super().__init__(
            scope,
            "cluster",
            settings=settings,
            description=f"HyperPod's share of EKS cluster {settings.eks_cluster_name}" if existing else "EKS control plane for HyperPod",
        )
        self.network = network
        if existing:
            self.cluster = self._existing_cluster()
            self._admin_access_entries()
            self.core_addons = self._missing_core_addons()
        else:
            self._new_cluster()
        # What add-ons that use Pod Identity wait for: ours, or the agent the cluster runs.
        self.pod_identity_agent: IConstruct = self.core_addons.get("eks-pod-identity-agent", self.cluster)
        self.bucket_key = self.data_key("DataKey", "data", "Encrypts the lifecycle and checkpoint buckets and the image mirror")
        # In the cluster, before any node, beside the core add-ons rather than after them
        # (a stack waits for the whole of the one before it).
        values = chart_values(settings)
        self.dependencies_chart = self._dependencies_chart(values)
        if existing:
            self.dependencies_chart.node.add_dependency(*self.kubectl_reaches_cluster)
        if settings.mirrors_chart_images:
            from stacks.image_mirror import mirror_chart_images

            # The chart's pods pull from the copies, so the copies come first.
            self.dependencies_chart.node.add_dependency(*mirror_chart_images(self, settings, values, self.bucket_key))
        # What HyperPod's nodes read at boot, built while the control plane is.
        self.access_logs = self.access_log_bucket("AccessLogsBucket")
        if settings.hyperpod.existing_lifecycle_bucket:
            # As the quick setup's S3BucketName and awsome's existing_s3_bucket_name: its
            # encryption, logging and versioning are its owner's (preflight checks that the
            # scripts' upload and the nodes can use its key).
            self.lifecycle_bucket = s3.Bucket.from_bucket_name(self, "LifecycleBucket", settings.lifecycle_bucket_name)
        else:
            self.lifecycle_bucket = self.data_bucket(
                "LifecycleBucket",
                self.bucket_key,
                self.access_logs,
                "lifecycle-bucket/",
                bucket_name=settings.lifecycle_bucket_name,
            )
        self.lifecycle_uri, self.lifecycle_scripts = lifecycle.deploy_scripts(self, self.lifecycle_bucket)
        # Shared storage in the GPU AZ, encrypted with the data key (fsx.enabled).
        self.file_system = storage.shared_file_system(self, settings, network, self.bucket_key) if settings.fsx.enabled else None
        if existing:
            compliance.acknowledge_kubectl_provider(self.kubectl_provider)
        else:
            compliance.acknowledge_eks_internals(self.cluster)
        self._outputs()

    def _new_cluster(self) -> None:
        settings, network = self.settings, self.network
        self.secrets_key = self.data_key("SecretsKey", "eks-secrets", "EKS envelope encryption of Kubernetes secrets")
        # Created ahead of the cluster so it gets our retention and key, not EKS's never-expire default.
        self.control_plane_logs = self.log_group(
            "ControlPlaneLogGroup", network.logs_key, f"/aws/eks/{settings.eks_cluster_name}/cluster"
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=settings.eks_cluster_name,
            version=eks.KubernetesVersion.of(settings.eks.version),
            vpc=network.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=network.eks_subnets)],
            # Control-plane ENIs share the node group so the API server and HyperPod nodes
            # reach each other without extra rules.
            security_group=network.efa_security_group,
            endpoint_access=_endpoint_access(settings),
            cluster_logging=[eks.ClusterLoggingTypes(_log_type(t)) for t in settings.eks.logging],
            secrets_encryption_key=self.secrets_key,
            # HyperPod provides every node: no Auto Mode, no managed node group.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # vpc-cni and kube-proxy come as managed add-ons below, so EKS must not also
            # install its self-managed copies.
            bootstrap_self_managed_addons=False,
            bootstrap_cluster_creator_admin_permissions=False,
            # Never retained: a kept cluster (and its kubectl Lambda's ENIs) would hold the network
            # stack's subnets and security group, and `cdk destroy` could not finish. Data lives in
            # the retained buckets, keys and log groups, not in the control plane.
            removal_policy=cdk.RemovalPolicy.DESTROY,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, settings.eks.version),
                private_subnets=network.eks_subnets,
            ),
        )
        self.cluster.node.add_dependency(self.control_plane_logs)
        cfn_cluster: eks.CfnCluster = self.cluster.node.default_child
        # Neither is a prop of aws_eks_v2.Cluster (aws-cdk-lib 2.275); both are properties of
        # AWS::EKS::Cluster that update in place.
        cfn_cluster.add_property_override("UpgradePolicy.SupportType", settings.eks.upgrade_policy)
        cfn_cluster.add_property_override("DeletionProtection", settings.eks_deletion_protection)
        if settings.eks.authentication_mode != "API":
            cfn_cluster.add_property_override("AccessConfig.AuthenticationMode", settings.eks.authentication_mode)
        self._admin_access_entries()
        self.core_addons = self._core_addons()

    def _outputs(self) -> None:
        settings = self.settings
        cdk.CfnOutput(self, "EksClusterName", value=self.cluster.cluster_name)
        cdk.CfnOutput(self, "EksClusterArn", value=self.cluster.cluster_arn)
        kubeconfig = settings.kubeconfig_command
        cdk.CfnOutput(self, "UpdateKubeconfigCommand", value=kubeconfig)
        where = f" {settings.private_endpoint_reach}" if settings.private_endpoint_reach else ""
        cdk.CfnOutput(
            self,
            "KubectlAccess",
            description="How the admin principals reach the cluster after deploy",
            value=f"As {' or '.join(settings.eks.admin_principal_arns) or 'a principal that has access to ' + settings.eks_cluster_name}"
            f"{where}: {kubeconfig} && kubectl get nodes",
        )

    def _admin_access_entries(self) -> None:
        admin = _cluster_admin()
        for arn in self.settings.eks.admin_principal_arns:
            # Keyed by the principal, not its position, so reordering the list replaces nothing.
            eks.AccessEntry(
                self,
                naming.admin_entry_id(arn),
                cluster=self.cluster,
                principal=arn,
                access_policies=[admin],
            )

    def _existing_cluster(self) -> eks.ICluster:
        """The cluster by name, with a kubectl provider of this stack's own, and nothing of the
        control plane created. The references, property by property:
        - VPC and subnets: both take the existing ones by ID (quick setup VpcId and
          EksPrivateSubnetIds; awsome existing_vpc_id, existing_private_subnet_ids); so does
          network.existing_vpc, which validation requires here.
        - Security group: both put the nodes in the existing cluster's group and add their rules
          to it (quick setup security-group-template with SecurityGroupId; awsome security_group
          module with existing_security_group_id, adding the self, Lustre and egress rules it
          lacks). Ours differs: the nodes keep the network stack's EFA group, whose self rules
          this project owns, and each group admits the other in one rule apiece, so the only
          change to the customer's group is one ingress rule this stack removes on teardown.
          network.existing_security_group_id may name the cluster's group to do as they do, but
          its rules stay the customer's (preflight names any missing), as adding one it already
          has fails the deploy.
        - Core add-ons: neither installs vpc-cni, kube-proxy, CoreDNS or the Pod Identity agent
          on an existing cluster (they live in the EKS stack/module it replaces); nor does this,
          except the agent where eks.existing_cluster.install_pod_identity_agent asks for it.
          preflight checks the VPC CNI version and the agent.
        - Helm chart: both install it on the existing cluster; so does this stack.
        - Access: the quick setup gives its Helm Lambda's role an access entry with
          AmazonEKSClusterAdminPolicy; this stack does the same for its kubectl Lambda, unless
          kubectl_role_arn names a role that has one. (awsome runs Helm as the user.)
        - cert-manager: the awsome Terraform installs it either way; here it stays an add-on of
          the addons stack, as with a new cluster."""
        settings, network = self.settings, self.network
        ec = settings.eks.existing_cluster
        attributes = dict(cluster_name=ec.name, cluster_security_group_id=ec.security_group_id, vpc=network.vpc)
        # The provider needs a cluster to be built for, and the imported cluster needs the
        # provider: a first handle without one breaks the circle.
        handle = eks.Cluster.from_cluster_attributes(self, "ExistingClusterHandle", **attributes)
        role = iam.Role.from_role_arn(self, "KubectlRole", ec.kubectl_role_arn, mutable=False) if ec.kubectl_role_arn else None
        self.kubectl_provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=handle,
            kubectl_layer=kubectl_layer(self, settings.eks.version),
            private_subnets=network.eks_subnets,
            # The nodes' group, which reaches the API server (the rule below, or the same group).
            security_groups=[network.efa_security_group],
            role=role,
        )
        if role is not None:
            # aws_eks_v2 adds the ECR Public policy to its own role under this condition; a given
            # role is not changed, so the condition would be left unused (cfn-lint W8001).
            self.node.try_remove_child("HasEcrPublic")
        cluster = eks.Cluster.from_cluster_attributes(self, "Cluster", **attributes, kubectl_provider=self.kubectl_provider)
        self.kubectl_reaches_cluster = self._connect_security_groups(ec.security_group_id)
        if role is None:
            self.kubectl_reaches_cluster.append(
                eks.AccessEntry(
                    self,
                    "KubectlProviderAccess",
                    cluster=cluster,
                    principal=self.kubectl_provider.role.role_arn,
                    access_policies=[_cluster_admin()],
                )
            )
        return cluster

    def _connect_security_groups(self, cluster_group_id: str) -> list[IConstruct]:
        """All traffic each way between the nodes' EFA group and the cluster's group: nodes and
        the kubectl Lambda call the API server (443), the control plane calls kubelets and
        webhooks on the nodes, and pods on HyperPod nodes reach CoreDNS and services on the
        cluster's other nodes, which carry the cluster group (EKS admits all traffic within
        it, and managed node groups join it)."""
        ours = self.network.efa_security_group.security_group_id
        if ours == cluster_group_id:
            return []  # the nodes are in the cluster's group (network.existing_security_group_id), which admits itself
        rules = [
            ec2.CfnSecurityGroupIngress(
                self, "ClusterGroupFromHyperPodNodes", group_id=cluster_group_id, source_security_group_id=ours,
                ip_protocol="-1", description="HyperPod nodes and this environment's kubectl Lambda (hyperpod-cdk)",
            ),
            ec2.CfnSecurityGroupIngress(
                self, "HyperPodNodesFromClusterGroup", group_id=ours, source_security_group_id=cluster_group_id,
                ip_protocol="-1", description="The EKS control plane and the cluster's other nodes",
            ),
        ]
        for rule in rules:
            compliance.acknowledge(
                rule,
                "Its source is a security group, not an address range: only the cluster's interfaces or ours can use it",
                "NIST.800.53.R5-EC2RestrictedCommonPorts",
            )
        return rules

    def _missing_core_addons(self) -> dict[str, eks.Addon]:
        """On an existing cluster, only the Pod Identity agent, and only when asked: it runs
        its own vpc-cni, kube-proxy and CoreDNS, which a second, managed copy would take over."""
        if "pod_identity_agent" not in self.settings.core_addons_installed:
            return {}
        agent = eks.Addon(
            self,
            "PodIdentityAgent",
            cluster=self.cluster,
            addon_name="eks-pod-identity-agent",
            addon_version=self.settings.eks.core_addons.pod_identity_agent.version,
            configuration_values=self.settings.eks.core_addons.pod_identity_agent.configuration_values or None,
            # Other workloads on a shared cluster may come to rely on it.
            preserve_on_delete=True,
        )
        overwrite_conflicts(agent)
        return {"eks-pod-identity-agent": agent}

    def _dependencies_chart(self, values: dict) -> eks.HelmChart:
        source = self.settings.hyperpod.helm_chart
        self.chart_prepared = chart.is_prepared(source.revision)
        if self.chart_prepared:
            asset = s3_assets.Asset(self, "DependenciesChartAsset", path=str(chart.prepared_dir(source.revision)))
        else:
            # Synth works offline without the chart (a stand-in folder, hashed by the
            # revision); deploy stops at its first change set (stop_deploy_without_chart).
            asset = s3_assets.Asset(
                self,
                "DependenciesChartAsset",
                path=str(UNPREPARED_CHART),
                asset_hash_type=cdk.AssetHashType.CUSTOM,
                asset_hash=f"hyperpod-chart-{source.revision}",
            )
        return eks.HelmChart(
            self,
            "DependenciesChart",
            cluster=self.cluster,
            chart_asset=asset,
            release=source.release,
            # HyperPod looks for its device plugins and health agents in kube-system.
            namespace="kube-system",
            create_namespace=False,
            values=values,
            wait=False,
        )

    def _core_addons(self) -> dict[str, eks.Addon]:
        """vpc-cni, kube-proxy, CoreDNS and the Pod Identity agent, with the control plane and
        before any node, as both references create them (CoreDNS stays DEGRADED until nodes
        come, which CloudFormation accepts; without it nodes boot with no cluster DNS)."""
        core = self.settings.eks.core_addons
        addons = {
            # With its network policy agent on (infra/checks/eks.py).
            "vpc-cni": self._addon("VpcCni", "vpc-cni", core.vpc_cni, vpc_cni_configuration(self.settings)),
            "kube-proxy": self._addon("KubeProxy", "kube-proxy", core.kube_proxy),
            "coredns": self._addon("CoreDns", "coredns", core.coredns),
        }
        # The cluster's own agent, so anything that asks the cluster for it (Pod Identity
        # service accounts) finds this one instead of installing a second.
        agent = self.cluster.eks_pod_identity_agent
        _pin(agent, core.pod_identity_agent)
        addons["eks-pod-identity-agent"] = agent
        for addon in addons.values():
            overwrite_conflicts(addon)
        return addons

    def _addon(self, id_: str, name: str, pinned: CoreAddon, values: dict | None = None) -> eks.Addon:
        return eks.Addon(
            self,
            id_,
            cluster=self.cluster,
            addon_name=name,
            addon_version=pinned.version,
            configuration_values=(pinned.configuration_values if values is None else values) or None,
        )


def stop_deploy_without_chart(stacks: list[cdk.Stack], settings: Settings) -> None:
    """A template rule in every stack that fails the change set, before anything is
    created, with the command that prepares the chart. Synth, review and diff still work."""
    message = chart.not_prepared_message(settings.env_name, settings.hyperpod.helm_chart.revision)
    for stack in stacks:
        cdk.CfnRule(
            stack,
            "HyperPodChartPrepared",
            assertions=[
                cdk.CfnRuleAssertion(assert_=cdk.Fn.condition_equals("not prepared", "prepared"), assert_description=message)
            ],
        )
    cdk.Annotations.of(stacks[0]).add_warning_v2("hyperpod-cdk:chart", f"deploy will stop: {message}")


def chart_values(settings: Settings) -> dict:
    """Values for the dependencies chart: the device plugins the instance groups need, health
    tooling on, cert-manager off (the cert-manager EKS add-on provides it); where the network
    has no way out, every image pointed at this environment's copy in ECR."""
    used = settings.device_resources
    ours = {
        "global": {"region": settings.region},
        "cert-manager": {"enabled": False},
        # Where the GPU operator runs it serves every NVIDIA node; a second plugin would
        # advertise the same GPUs (the awsome Terraform turns the plain one off likewise).
        "nvidia-device-plugin": {"devicePlugin": {"enabled": "nvidia.com/gpu" in used and not settings.gpu_operator}},
        "aws-efa-k8s-device-plugin": {"devicePlugin": {"enabled": catalogue.EFA_RESOURCE in used}},
        "neuron-device-plugin": {"devicePlugin": {"enabled": "aws.amazon.com/neuron" in used}},
        "health-monitoring-agent": {"enabled": True},
        "deep-health-check": {"enabled": True},
        "job-auto-restart": {"enabled": True},
    }
    # A device plugin that does not tolerate a group's taint never runs there, and the group's
    # nodes never advertise their devices: its own tolerations, and one per such taint.
    for plugin, defaults in hyperpod_chart.DEVICE_PLUGIN_TOLERATIONS.items():
        serves = next(i.serves for i in hyperpod_chart.CHART_IMAGES if i.subchart == plugin)
        taints = {(t.key, t.effect) for g in settings.hyperpod.instance_groups if catalogue.figures(g.instance_type)
                  and serves in g.device_resources for t in g.taints}
        if taints:
            ours[plugin]["tolerations"] = defaults + [
                {"key": key, "operator": "Exists", "effect": effect} for key, effect in sorted(taints)
            ]
    if settings.gpu_operator:
        ours["gpu-operator"] = hyperpod_chart.gpu_operator_values(settings.region)
    if settings.mirrors_chart_images:
        ours = deep_merge(ours, hyperpod_chart.mirror_values(settings, ours))
    return deep_merge(ours, settings.hyperpod.helm_chart.values)


def _cluster_admin() -> eks.AccessPolicy:
    return eks.AccessPolicy.from_access_policy_name("AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)


def _pin(addon: eks.Addon, pinned: CoreAddon) -> None:
    cfn: eks.CfnAddon = addon.node.default_child
    if pinned.version:
        cfn.addon_version = pinned.version
    if pinned.configuration_values:
        cfn.configuration_values = cdk.Stack.of(addon).to_json_string(pinned.configuration_values)


def _log_type(name: str) -> str:
    return {"controllerManager": "CONTROLLER_MANAGER"}.get(name, name.upper())
