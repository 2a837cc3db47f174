"""HyperPod observability (`amazon-sagemaker-hyperpod-observability`): an Amazon Managed
Prometheus workspace, optionally Amazon Managed Grafana, and the collector's role."""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon
from addons.pod_identity_agent import PodIdentityAgentAddon
from infra import lazy

cdk = lazy.module("aws_cdk")
aps = lazy.module("aws_cdk.aws_aps")
grafana = lazy.module("aws_cdk.aws_grafana")
iam = lazy.module("aws_cdk.aws_iam")
compliance = lazy.module("infra.compliance")
pod_identity = lazy.module("infra.pod_identity")

NAMESPACE = "hyperpod-observability"
SERVICE_ACCOUNT = "hyperpod-observability-operator-otel-collector"
# Config key -> the add-on's metricsProvider category.
METRIC_CATEGORIES = {
    "training": "trainingMetrics",
    "task_governance": "taskGovernanceMetrics",
    "scaling": "scalingMetrics",
    "cluster": "clusterMetrics",
    "node": "nodeMetrics",
    "network": "networkMetrics",
    "accelerated_compute": "acceleratedComputeMetrics",
}


class ObservabilityAddon(ManagedAddon):
    key = "observability"
    title = "HyperPod observability"
    eks_name = "amazon-sagemaker-hyperpod-observability"
    requires = (PodIdentityAgentAddon,)

    def prerequisites(self, ctx: AddonContext):
        stack = ctx.scope
        obs = self.settings.addons.observability
        name = f"{self.settings.prefix}-{self.settings.env_name}"
        key = stack.data_key("MetricsKey", "metrics", "Encrypts the Amazon Managed Prometheus workspace")
        self.prometheus = aps.CfnWorkspace(
            stack,
            "Prometheus",
            alias=f"{name}-hyperpod",
            kms_key_arn=key.key_arn,
            tags=[cdk.CfnTag(key=k, value=v) for k, v in sorted(self.settings.all_tags.items())],
        )
        self.prometheus.apply_removal_policy(stack.data_removal_policy)
        self.grafana = self._grafana(ctx, name) if obs.grafana.enabled else None
        logs_arn = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:/aws/sagemaker/Clusters/*"
        identity = pod_identity.pod_identity_role(
            ctx.scope,
            ctx.cluster,
            "ObservabilityCollector",
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            description="HyperPod observability collector: remote write to this workspace, cluster logs",
            statements=(
                iam.PolicyStatement(
                    sid="RemoteWrite", actions=["aps:RemoteWrite"], resources=[self.prometheus.attr_arn]
                ),
                iam.PolicyStatement(
                    sid="ClusterLogs",
                    actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                    resources=[logs_arn, f"{logs_arn}:log-stream:*"],
                ),
            ),
        )
        compliance.acknowledge(
            identity.policy,
            "HyperPod names each cluster's log groups /aws/sagemaker/Clusters/<cluster>/<id> at run time, "
            "so the collector's CloudWatch Logs access is scoped to that prefix, not one group",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:logs:{stack.region}:{stack.account}:log-group:/aws/sagemaker/Clusters/*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:logs:{stack.region}:{stack.account}:log-group:/aws/sagemaker/Clusters/*:log-stream:*]",
        )
        cdk.CfnOutput(stack, "PrometheusEndpoint", value=self.prometheus.attr_prometheus_endpoint)
        # The add-on's configuration references the workspace, which orders them already.
        return [identity.association]

    def configuration(self, ctx: AddonContext) -> dict:
        obs = self.settings.addons.observability
        values = {
            "ampWorkspace": {"prometheusEndpoint": self.prometheus.attr_prometheus_endpoint, "arn": self.prometheus.attr_arn},
            "metricsProvider": {
                category: {"level": getattr(obs.metrics, field), "scrapeInterval": obs.scrape_interval_seconds}
                for field, category in METRIC_CATEGORIES.items()
            },
            "logging": {"enabled": obs.logging},
        }
        if self.grafana is not None:
            values["amgWorkspace"] = {"workspaceName": self.grafana.name, "arn": self._grafana_arn(ctx)}
        return values

    def _grafana_arn(self, ctx: AddonContext) -> str:
        stack = ctx.scope
        return f"arn:{stack.partition}:grafana:{stack.region}:{stack.account}:/workspaces/{self.grafana.attr_id}"

    def _grafana(self, ctx: AddonContext, name: str) -> grafana.CfnWorkspace:
        stack = ctx.scope
        settings = self.settings.addons.observability.grafana
        role = iam.Role(
            stack,
            "GrafanaRole",
            description="Amazon Managed Grafana: query this environment's Prometheus workspace",
            assumed_by=iam.ServicePrincipal("grafana.amazonaws.com").with_conditions(
                {"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
        )
        iam.ManagedPolicy(
            stack,
            "GrafanaPolicy",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    sid="QueryPrometheus",
                    actions=["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata", "aps:DescribeWorkspace"],
                    resources=[self.prometheus.attr_arn],
                ),
            ],
        )
        workspace = grafana.CfnWorkspace(
            stack,
            "Grafana",
            name=f"{name}-hyperpod",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=list(settings.authentication_providers),
            permission_type="CUSTOMER_MANAGED",
            role_arn=role.role_arn,
            data_sources=["PROMETHEUS"],
            saml_configuration=grafana.CfnWorkspace.SamlConfigurationProperty(
                idp_metadata=grafana.CfnWorkspace.IdpMetadataProperty(url=settings.saml_metadata_url)
            )
            if "SAML" in settings.authentication_providers
            else None,
        )
        cdk.CfnOutput(stack, "GrafanaUrl", value=f"https://{workspace.attr_endpoint}")
        return workspace
