"""HyperPod observability (`amazon-sagemaker-hyperpod-observability`): an Amazon Managed
Prometheus workspace, optionally Amazon Managed Grafana, and the collector's role."""

from __future__ import annotations

from addons.base import AddonContext, ManagedAddon
from addons.pod_identity_agent import PodIdentityAgentAddon
from infra import alerting, lazy
from infra.config import EKS_ADDON_NAMES

cdk = lazy.module("aws_cdk")
aps = lazy.module("aws_cdk.aws_aps")
grafana = lazy.module("aws_cdk.aws_grafana")
iam = lazy.module("aws_cdk.aws_iam")
compliance = lazy.module("infra.compliance")
pod_identity = lazy.module("infra.pod_identity")

NAMESPACE = "hyperpod-observability"
SERVICE_ACCOUNT = "hyperpod-observability-operator-otel-collector"
# Config key -> the add-on's metricsProvider category. AWS publishes no configuration schema
# for this add-on, so the keys are the ones the references that deploy send. Both send the
# categories below except the cluster-level one, which the awsome Terraform (and the quick
# setup before its Ray version) calls customMetrics and the quick setup's newest template
# calls clusterMetrics; no reference sends both. That newest template also nests `logging`
# inside metricsProvider, so that level cannot be strict if it deploys, and then either name
# is accepted; if it is strict, only customMetrics (the newer dated reference) is. Hence
# customMetrics (tests/fixtures/observability_addon_reference.json).
METRIC_CATEGORIES = {
    "training": "trainingMetrics",
    "inference": "inferenceMetrics",
    "task_governance": "taskGovernanceMetrics",
    "scaling": "scalingMetrics",
    "cluster": "customMetrics",
    "node": "nodeMetrics",
    "network": "networkMetrics",
    "accelerated_compute": "acceleratedComputeMetrics",
}
# The collector's CloudWatch Logs actions, as HyperPod's observability troubleshooting page and
# both references list them. DescribeLogGroups and StopQuery take no resource (Service
# Authorization Reference): scoped to the log groups they would never be allowed.
LOGS_ON_GROUPS = (
    "CreateLogGroup", "CreateLogStream", "DescribeLogStreams", "PutLogEvents", "GetLogEvents",
    "FilterLogEvents", "GetLogRecord", "StartQuery", "GetQueryResults",
)
LOGS_WITHOUT_RESOURCE = ("DescribeLogGroups", "StopQuery")


class ObservabilityAddon(ManagedAddon):
    key = "observability"
    title = "HyperPod observability"
    eks_name = EKS_ADDON_NAMES["observability"]
    requires = (PodIdentityAgentAddon,)
    # The Prometheus workspace this project creates with it (None: the cluster's own add-on).
    prometheus = None

    def prerequisites(self, ctx: AddonContext):
        stack = ctx.scope
        obs = self.settings.addons.observability
        name = f"{self.settings.prefix}-{self.settings.env_name}"
        key = stack.data_key("MetricsKey", "metrics", "Encrypts the Amazon Managed Prometheus workspace")
        alerts = self.settings.operations.alerts.enabled
        tags = [cdk.CfnTag(key=k, value=v) for k, v in sorted(self.settings.all_tags.items())]
        self.prometheus = aps.CfnWorkspace(
            stack,
            "Prometheus",
            alias=f"{name}-hyperpod",
            kms_key_arn=key.key_arn,
            # Where the alert rules are sent: the operations topic, by its name (nothing imported),
            # which the operations stack has created before this stack (app.py).
            alert_manager_definition=alerting.alert_manager_definition(self.settings) if alerts else None,
            tags=tags,
        )
        self.prometheus.apply_removal_policy(stack.data_removal_policy)
        if alerts:  # the rules it evaluates, beside it
            aps.CfnRuleGroupsNamespace(
                stack,
                "AlertRules",
                name=alerting.rule_groups_name(self.settings),
                workspace=self.prometheus.attr_arn,
                data=alerting.rule_groups_yaml(self.settings),
                tags=tags,
            )
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
                    actions=[f"logs:{a}" for a in LOGS_ON_GROUPS],
                    resources=[logs_arn, f"{logs_arn}:log-stream:*"],
                ),
                iam.PolicyStatement(
                    sid="LogsWithoutResource",
                    actions=[f"logs:{a}" for a in LOGS_WITHOUT_RESOURCE],
                    resources=["*"],
                ),
            ),
        )
        compliance.acknowledge(
            identity.policy,
            "HyperPod names each cluster's log groups /aws/sagemaker/Clusters/<cluster>/<id> at run time, "
            "so the collector's CloudWatch Logs access is scoped to that prefix, not one group; DescribeLogGroups "
            "and StopQuery support no resource-level permissions (Service Authorization Reference)",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:logs:{stack.region}:{stack.account}:log-group:/aws/sagemaker/Clusters/*]",
            f"AwsSolutions-IAM5[Resource::arn:{compliance.partition(stack)}:logs:{stack.region}:{stack.account}:log-group:/aws/sagemaker/Clusters/*:log-stream:*]",
            "AwsSolutions-IAM5[Resource::*]",
        )
        cdk.CfnOutput(stack, "PrometheusEndpoint", value=self.prometheus.attr_prometheus_endpoint)
        # The add-on's configuration references the workspace, which orders them already.
        return [identity.association]

    def configuration(self, ctx: AddonContext) -> dict:
        obs = self.settings.addons.observability
        values = {
            "ampWorkspace": {"prometheusEndpoint": self._endpoint(ctx), "arn": self.prometheus.attr_arn},
            "metricsProvider": {
                category: {"level": getattr(obs.metrics, field), "scrapeInterval": obs.scrape_interval_seconds}
                for field, category in METRIC_CATEGORIES.items()
            },
            "logging": {"enabled": obs.logging},
        }
        if self.grafana is not None:
            values["amgWorkspace"] = {"workspaceName": self.grafana.name, "arn": self._grafana_arn(ctx)}
        return values

    def _endpoint(self, ctx: AddonContext) -> str:
        """The workspace's endpoint without the trailing `/` the AMP API returns: the quick
        setup builds it so, and the awsome Terraform strips it (modules/observability/main.tf,
        trimsuffix, since its commit 9e060a3)."""
        stack = ctx.scope
        return f"https://aps-workspaces.{stack.region}.{stack.url_suffix}/workspaces/{self.prometheus.attr_workspace_id}"

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
