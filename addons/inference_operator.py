"""HyperPod inference operator (`amazon-sagemaker-hyperpod-inference`, an EKS add-on since Inference
Operator 3.0, 2026-02-23) and the add-ons it refuses to install without: the Mountpoint for S3 and
FSx CSI drivers and metrics-server (HyperPod's inference troubleshooting page, "missing CSI
drivers"; the quick setup and the awsome Terraform install them beside it). cert-manager is the
training operator's, already required.

What the operator needs beside it, from the setup page, the 3.0 release notes and the two
references (aws/sagemaker-hyperpod-cluster-setup `inference-addon-iam-roles-template.yaml` and
`inference-operator-addon-template.yaml`; awslabs/awsome-distributed-ai
`modules/hyperpod_inference_operator/main.tf`):
- an execution role for its controller (`hyperpod-inference-system/hyperpod-inference-controller-manager`)
  with the managed `AmazonSageMakerHyperPodInferenceAccess`, trusted by SageMaker and by the
  controller's service account through the cluster's OIDC provider (not Pod Identity: every
  source trusts sts:AssumeRoleWithWebIdentity), plus the 3.0 tagging permissions on ACM
  certificates and the TLS bucket's objects;
- a bucket for the TLS certificates the operator issues per endpoint;
- roles for the load balancer controller and KEDA it runs (`alb`, `keda` in its configuration):
  each endpoint gets an Application Load Balancer, and autoscaling reads CloudWatch or Prometheus.
"""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon, ReadyWhen, tolerate_every_taint
from addons.cert_manager import CertManagerAddon
from addons.fsx_csi import FsxCsiAddon
from addons.task_governance import TaskGovernanceAddon
from infra import lazy
from infra.config import EKS_ADDON_NAMES, INFERENCE_ADDON_NAME

cdk = lazy.module("aws_cdk")
iam = lazy.module("aws_cdk.aws_iam")
compliance = lazy.module("infra.compliance")
pod_identity = lazy.module("infra.pod_identity")

NAMESPACE = "hyperpod-inference-system"
CONTROLLER = "hyperpod-inference-controller-manager"  # its service account and its Deployment
ALB_SERVICE_ACCOUNT = "aws-load-balancer-controller"
KEDA_SERVICE_ACCOUNT = "keda-operator"
MANAGED_POLICY = "AmazonSageMakerHyperPodInferenceAccess"
# The quick setup names the execution role SageMakerHyperPodInference-<suffix>.
ROLE_NAME_PREFIX = "SageMakerHyperPodInference-"
# The Mountpoint S3 CSI driver's controller service account (the quick setup's S3CsiDriverRole).
S3_CSI_SERVICE_ACCOUNT = "s3-csi-driver-sa"
# The load balancer controller's own tag on what it creates (aws-load-balancer-controller's IAM policy).
ALB_TAG = "elbv2.k8s.aws/cluster"


def execution_role_name(settings) -> str:
    return f"{ROLE_NAME_PREFIX}{settings.prefix}-{settings.env_name}"[:64]


class S3CsiAddon(ManagedAddon):
    key = "s3_csi"
    title = "Mountpoint for Amazon S3 CSI driver"
    eks_name = EKS_ADDON_NAMES["s3_csi"]

    def prerequisites(self, ctx: AddonContext):
        # Mounts only what endpoints serve: the sample job's checkpoints, read-only.
        bucket = f"arn:{ctx.scope.partition}:s3:::{self.settings.checkpoint_bucket_name}"
        identity = pod_identity.web_identity_role(
            ctx.scope, ctx.cluster, "S3CsiDriver", namespace="kube-system", service_account=S3_CSI_SERVICE_ACCOUNT,
            description="Mountpoint S3 CSI driver: read the checkpoint bucket the served model is in",
            statements=(
                iam.PolicyStatement(sid="ListModels", actions=["s3:ListBucket"], resources=[bucket]),
                iam.PolicyStatement(sid="ReadModels", actions=["s3:GetObject"], resources=[f"{bucket}/*"]),
                iam.PolicyStatement(
                    sid="DecryptThroughS3", actions=["kms:Decrypt"], resources=[f"arn:{ctx.scope.partition}:kms:{ctx.scope.region}:{ctx.scope.account}:key/*"],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{ctx.scope.region}.amazonaws.com"},
                                "StringLike": {"kms:EncryptionContext:aws:s3:arn": f"{bucket}/*"}},
                ),
            ),
        )
        compliance.acknowledge(
            identity.policy,
            "The driver reads the served model's objects anywhere in the checkpoint bucket, whose key is the cluster stack's "
            "data key (or a kept one from an earlier deploy): Decrypt only through S3 and only for this bucket's objects",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(ctx.scope)}:s3:::{self.settings.checkpoint_bucket_name}/*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(ctx.scope)}:kms:{self.settings.region}:{self.settings.account}:key/*]",
        )
        self.role = identity.role
        # The add-on names the role (a dependency already); its permissions come with the policy.
        return [identity.policy]

    def build(self, ctx: AddonContext, after):
        built = super().build(ctx, after)
        if not self.existing:  # the add-on annotates its service account with the role (IRSA)
            addon = ctx.scope.node.find_child(type(self).__name__)
            addon.node.default_child.service_account_role_arn = self.role.role_arn
        return built


class MetricsServerAddon(ManagedAddon):
    key = "metrics_server"
    title = "metrics-server"
    eks_name = EKS_ADDON_NAMES["metrics_server"]

    def configuration(self, ctx: AddonContext) -> dict:
        # As the awsome Terraform sends it: HyperPod nodes carry taints a plain pod does not tolerate.
        return {"tolerations": tolerate_every_taint()}


# The load balancer controller's permissions (its published IAM policy, as the quick setup's
# AlbControllerPolicy carries it), grouped by what bounds them.
ALB_READ = (
    "ec2:DescribeAccountAttributes", "ec2:DescribeAddresses", "ec2:DescribeAvailabilityZones", "ec2:DescribeInternetGateways",
    "ec2:DescribeVpcs", "ec2:DescribeVpcPeeringConnections", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups",
    "ec2:DescribeInstances", "ec2:DescribeNetworkInterfaces", "ec2:DescribeTags", "ec2:GetCoipPoolUsage", "ec2:DescribeCoipPools",
    "ec2:GetSecurityGroupsForVpc", "ec2:DescribeIpamPools", "ec2:DescribeRouteTables",
    *(f"elasticloadbalancing:Describe{x}" for x in (
        "LoadBalancers", "LoadBalancerAttributes", "Listeners", "ListenerCertificates", "SSLPolicies", "Rules", "TargetGroups",
        "TargetGroupAttributes", "TargetHealth", "Tags", "TrustStores", "ListenerAttributes", "CapacityReservation")),
    "cognito-idp:DescribeUserPoolClient", "acm:ListCertificates", "acm:DescribeCertificate", "iam:ListServerCertificates",
    "iam:GetServerCertificate", "waf-regional:GetWebACL", "waf-regional:GetWebACLForResource", "wafv2:GetWebACL",
    "wafv2:GetWebACLForResource", "shield:GetSubscriptionState", "shield:DescribeProtection",
)
# Only on what carries the controller's tag (it tags all it creates).
ALB_ON_ITS_OWN = (
    "ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress", "ec2:DeleteSecurityGroup",
    "elasticloadbalancing:ModifyLoadBalancerAttributes", "elasticloadbalancing:SetIpAddressType", "elasticloadbalancing:SetSecurityGroups",
    "elasticloadbalancing:SetSubnets", "elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:ModifyTargetGroup",
    "elasticloadbalancing:ModifyTargetGroupAttributes", "elasticloadbalancing:DeleteTargetGroup", "elasticloadbalancing:ModifyListenerAttributes",
    "elasticloadbalancing:ModifyCapacityReservation", "elasticloadbalancing:ModifyIpPools",
)
# Listeners, rules and targets of the load balancers above (no tag condition in the policy): this
# account's in this region.
ALB_LISTENERS = (
    "elasticloadbalancing:CreateListener", "elasticloadbalancing:DeleteListener", "elasticloadbalancing:CreateRule",
    "elasticloadbalancing:DeleteRule", "elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets",
    "elasticloadbalancing:SetWebAcl", "elasticloadbalancing:ModifyListener", "elasticloadbalancing:AddListenerCertificates",
    "elasticloadbalancing:RemoveListenerCertificates", "elasticloadbalancing:ModifyRule", "elasticloadbalancing:SetRulePriorities",
)
# A web ACL or Shield protection on an endpoint's load balancer, where its annotations ask for one.
ALB_PROTECTION = (
    "waf-regional:AssociateWebACL", "waf-regional:DisassociateWebACL", "wafv2:AssociateWebACL", "wafv2:DisassociateWebACL",
    "shield:CreateProtection", "shield:DeleteProtection",
)


class InferenceOperatorAddon(ManagedAddon):
    key = "inference"
    title = "HyperPod inference operator"
    eks_name = INFERENCE_ADDON_NAME
    # Its controller serving (the setup page's verification step reads this Deployment) and the
    # endpoint type established before an endpoint is applied.
    ready_when = ReadyWhen.crd_established("inferenceendpointconfigs.inference.sagemaker.aws.amazon.com")
    also_ready_when = (ReadyWhen.deployment_available(NAMESPACE, CONTROLLER),)
    requires = (CertManagerAddon, FsxCsiAddon, S3CsiAddon, MetricsServerAddon)
    # Endpoints join the team queues task governance makes.
    after = (TaskGovernanceAddon,)

    @property
    def config(self):
        return self.settings.inference

    @property
    def config_path(self) -> str:
        return "inference"

    def prerequisites(self, ctx: AddonContext):
        stack, s = ctx.scope, self.settings
        self.tls_bucket = stack.data_bucket("TlsCertificates", ctx.bucket_key, ctx.access_logs, "tls-certificates/")
        role_name = execution_role_name(s)
        role_arn = f"arn:{stack.partition}:iam::{stack.account}:role/{role_name}"
        execution = pod_identity.web_identity_role(
            stack, ctx.cluster, "InferenceOperator", namespace=NAMESPACE, service_account=CONTROLLER,
            description="HyperPod inference operator controller (execution role)", role_name=role_name,
            managed_policies=(MANAGED_POLICY,),
            also_assumed_by=(iam.ServicePrincipal("sagemaker.amazonaws.com"),),
            statements=(
                # Inference Operator 3.0 release notes, prerequisites: it tags ACM certificates and
                # the TLS bucket's objects.
                iam.PolicyStatement(sid="TagCertificates", actions=["acm:AddTagsToCertificate"],
                                    resources=[f"arn:{stack.partition}:acm:{stack.region}:{stack.account}:certificate/*"]),
                iam.PolicyStatement(sid="TagTlsObjects", actions=["s3:PutObjectTagging"], resources=[self.tls_bucket.arn_for_objects("*")]),
                # It passes its own role to SageMaker (UpdateClusterInference).
                iam.PolicyStatement(sid="PassItself", actions=["iam:PassRole"], resources=[role_arn],
                                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}),
            ),
        )
        self.tls_bucket.grant_read_write(execution.policy)
        ctx.bucket_key.grant_encrypt_decrypt(execution.policy)
        compliance.acknowledge(
            execution.role,
            "The inference operator add-on documents the AWS-managed AmazonSageMakerHyperPodInferenceAccess policy as its "
            "execution role's permissions (HyperPod model deployment setup page)",
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{MANAGED_POLICY}]",
        )
        compliance.acknowledge(
            execution.policy,
            "The operator issues one ACM certificate per endpoint and writes each endpoint's certificate objects to its own "
            "TLS bucket, names it chooses at run time; the 3.0 release notes grant the tagging on those",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:acm:{s.region}:{s.account}:certificate/*]",
            f"AwsSolutions-IAM5[Resource::<{stack.get_logical_id(self.tls_bucket.node.default_child)}.Arn>/*]",
            "AwsSolutions-IAM5[Action::s3:Abort*]", "AwsSolutions-IAM5[Action::s3:DeleteObject*]",
            "AwsSolutions-IAM5[Action::s3:GetBucket*]", "AwsSolutions-IAM5[Action::s3:GetObject*]", "AwsSolutions-IAM5[Action::s3:List*]",
            "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]", "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
        )
        self.execution_role = execution.role
        alb, keda = self._alb_role(ctx), self._keda_role(ctx)
        self.alb_role, self.keda_role = alb.role, keda.role
        cdk.CfnOutput(stack, "TlsCertificateBucket", value=self.tls_bucket.bucket_name)
        # The configuration names the roles (dependencies already); their permissions are the policies.
        return [execution.policy, alb.policy, keda.policy]

    def configuration(self, ctx: AddonContext) -> dict:
        # The keys the awsome Terraform sends (tests/fixtures/inference_addon_reference.json).
        return {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": self.tls_bucket.bucket_name,
            "hyperpodClusterArn": ctx.hyperpod_cluster_arn,
            "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": self.alb_role.role_arn}},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }

    def _alb_role(self, ctx: AddonContext):
        tagged = {"Null": {f"aws:ResourceTag/{ALB_TAG}": "false"}}
        p, r, a = ctx.scope.partition, ctx.scope.region, ctx.scope.account
        elb = f"arn:{p}:elasticloadbalancing:{r}:{a}"
        part = compliance.partition(ctx.scope)  # as the findings name it
        identity = pod_identity.web_identity_role(
            ctx.scope, ctx.cluster, "InferenceLoadBalancerController", namespace=NAMESPACE, service_account=ALB_SERVICE_ACCOUNT,
            description="The inference operator's load balancer controller: one load balancer per endpoint",
            statements=(
                iam.PolicyStatement(sid="LinkedRole", actions=["iam:CreateServiceLinkedRole"], resources=["*"],
                                    conditions={"StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}}),
                iam.PolicyStatement(sid="Read", actions=list(ALB_READ), resources=["*"]),
                iam.PolicyStatement(sid="CreateTagged", actions=["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup",
                                                                  "ec2:CreateSecurityGroup"],
                                    resources=["*"], conditions={"Null": {f"aws:RequestTag/{ALB_TAG}": "false"}}),
                iam.PolicyStatement(sid="TagWhatItCreates", actions=["ec2:CreateTags", "elasticloadbalancing:AddTags"], resources=["*"],
                                    conditions={"Null": {f"aws:RequestTag/{ALB_TAG}": "false"}}),
                iam.PolicyStatement(sid="ChangeItsOwn", actions=list(ALB_ON_ITS_OWN), resources=["*"], conditions=tagged),
                iam.PolicyStatement(sid="Listeners", actions=list(ALB_LISTENERS), resources=[f"{elb}:*"]),
                iam.PolicyStatement(sid="Protection", actions=list(ALB_PROTECTION), resources=[
                    f"{elb}:loadbalancer/app/*/*", f"arn:{p}:wafv2:{r}:{a}:regional/webacl/*/*", f"arn:{p}:waf-regional:{r}:{a}:webacl/*",
                    f"arn:{p}:shield::{a}:protection/*"]),
            ),
        )
        compliance.acknowledge(
            identity.policy,
            "The load balancer controller creates each endpoint's load balancer, target group and security group at run time: "
            "creation only with its cluster tag, changes only on what carries it, reads on everything (the controller's own "
            "published policy; Describe calls take no resource)",
            "AwsSolutions-IAM5[Resource::*]",
            *(f"AwsSolutions-IAM5[Resource::{arn}]" for arn in (
                f"arn:{part}:elasticloadbalancing:{r}:{a}:*", f"arn:{part}:elasticloadbalancing:{r}:{a}:loadbalancer/app/*/*",
                f"arn:{part}:wafv2:{r}:{a}:regional/webacl/*/*", f"arn:{part}:waf-regional:{r}:{a}:webacl/*", f"arn:{part}:shield::{a}:protection/*")),
        )
        return identity

    def _keda_role(self, ctx: AddonContext):
        stack = ctx.scope
        identity = pod_identity.web_identity_role(
            stack, ctx.cluster, "InferenceKeda", namespace=NAMESPACE, service_account=KEDA_SERVICE_ACCOUNT,
            description="The inference operator's KEDA: scale endpoints on CloudWatch or Managed Prometheus metrics",
            statements=(
                iam.PolicyStatement(sid="CloudWatch", actions=["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"],
                                    resources=["*"]),
                iam.PolicyStatement(sid="Prometheus", actions=["aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"],
                                    resources=[f"arn:{stack.partition}:aps:{stack.region}:{stack.account}:workspace/*"]),
            ),
        )
        compliance.acknowledge(
            identity.policy,
            "CloudWatch's metric reads support no resource-level permissions; the Prometheus queries are this account's "
            "workspaces in this region, which an endpoint's autoscaling names at run time",
            "AwsSolutions-IAM5[Resource::*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(ctx.scope)}:aps:{self.settings.region}:{self.settings.account}:workspace/*]",
        )
        return identity
