"""What tells people the platform stopped working, as plain data the operations stack builds
and the tests check without a synth: HyperPod's EventBridge events and the lines they become
in a mail, the Managed Prometheus alert rules with the metric each reads, and the alert
manager definition that sends them to the same SNS topic.

Event types and fields: "Events that Amazon SageMaker AI sends to Amazon EventBridge"
(docs.aws.amazon.com/sagemaker/latest/dg/automating-sagemaker-with-eventbridge.html) and the
HyperPod cluster events reference (sagemaker-hyperpod-cluster-events-reference.html); the
awsome repository's e-mail template formats the same events with a Lambda and SES, here an
input transformer writes the line and SNS mails it. Metrics: the observability add-on's set
(hyperpod-observability-cluster-metrics.html): DCGM for GPUs, kube-state-metrics for nodes
and pods, Kueue for task governance; FSx for Lustre's come from CloudWatch, so its capacity
is a CloudWatch alarm, not a Prometheus rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import yaml

from infra import naming

if TYPE_CHECKING:
    from infra.config import Settings

EVENT_SOURCE = "aws.sagemaker"


@dataclass(frozen=True)
class EventRule:
    """One EventBridge rule: a HyperPod detail type, where its event names the cluster, and
    the line a person reads (EventBridge input transformer: <name> takes the JSON path's value)."""

    id_: str
    detail_type: str
    cluster_name_at: tuple[str, ...]
    paths: dict[str, str]
    message: str
    # Only clusters with continuous provisioning emit this type (the cluster events reference).
    continuous_only: bool = False


EVENT_RULES = (
    EventRule(
        "ClusterStateChange",
        "SageMaker HyperPod Cluster State Change",
        ("ClusterName",),
        {"cluster": "$.detail.ClusterName", "status": "$.detail.ClusterStatus", "failure": "$.detail.FailureMessage", "time": "$.time"},
        "HyperPod cluster <cluster> is <status> (<time>). <failure>",
    ),
    EventRule(
        "NodeHealth",
        "SageMaker HyperPod Cluster Node Health Event",
        ("ClusterName",),
        {
            "cluster": "$.detail.ClusterName", "instance": "$.detail.InstanceId", "health": "$.detail.HealthSummary.HealthStatus",
            "reason": "$.detail.HealthSummary.HealthStatusReason", "repair": "$.detail.HealthSummary.RepairAction",
            "advice": "$.detail.HealthSummary.Recommendation", "time": "$.time",
        },
        "HyperPod cluster <cluster>: node <instance> is <health> (<time>). <reason> Repair action: <repair>. <advice>",
    ),
    EventRule(
        "ClusterEvent",
        "SageMaker HyperPod Cluster Event",
        ("EventDetails", "ClusterName"),
        {
            "cluster": "$.detail.EventDetails.ClusterName", "level": "$.detail.EventDetails.EventLevel",
            "resource": "$.detail.EventDetails.ResourceType", "description": "$.detail.EventDetails.Description", "time": "$.time",
        },
        "HyperPod cluster <cluster>, <level> on <resource> (<time>): <description>",
        continuous_only=True,
    ),
)


def event_rules(settings: Settings) -> list[EventRule]:
    return [r for r in EVENT_RULES if settings.hyperpod.continuous or not r.continuous_only]


def event_pattern(rule: EventRule, settings: Settings) -> dict:
    """The rule's pattern: HyperPod's detail type, for this cluster by name. The name, not the
    ARN: it is known from config (no import of the HyperPod stack's export, which a replaced
    cluster would change while this stack imports it) and a cluster recreated under it is ours."""
    detail: dict = {}
    inner = detail
    for key in rule.cluster_name_at[:-1]:
        inner = inner.setdefault(key, {})
    inner[rule.cluster_name_at[-1]] = [settings.hyperpod_cluster_name]
    if rule.id_ == "ClusterEvent":
        inner["EventLevel"] = list(settings.operations.notifications.cluster_event_levels)
    return {"source": [EVENT_SOURCE], "detail-type": [rule.detail_type], "detail": detail}


def input_template(rule: EventRule) -> str:
    """A JSON string: what SNS delivers as the mail's body."""
    return f'"{rule.message}"'


def topic_arn(settings: Settings) -> str:
    """The topic events and alerts go to: the one given, or the one the operations stack names."""
    given = settings.operations.notifications.topic_arn
    if given:
        return given
    name = naming.operations_topic_name(settings.prefix, settings.env_name)
    return f"arn:{naming.partition(settings.region)}:sns:{settings.region}:{settings.account}:{name}"


def publishers(settings: Settings) -> set[str]:
    """The service principals that publish to the operations topic in this config: EventBridge's
    rules always, Managed Prometheus' alert manager and CloudWatch's FSx alarm with alerts."""
    out = {"events.amazonaws.com"}
    if settings.operations.alerts.enabled:
        out.add("aps.amazonaws.com")
        if settings.fsx.enabled and settings.fsx.existing is None:
            out.add("cloudwatch.amazonaws.com")
    return out


@dataclass(frozen=True)
class AlertRule:
    """One Prometheus alerting rule and the metric it reads (which a test finds in the
    observability add-on's documented set)."""

    name: str
    metric: str
    source: str
    expr: str
    for_minutes: int
    severity: str
    summary: str
    labels: dict[str, str] = field(default_factory=dict)

    def as_rule(self) -> dict:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": f"{self.for_minutes}m",
            "labels": {"severity": self.severity, **self.labels},
            "annotations": {"summary": self.summary, "metric": self.metric},
        }


def alert_rules(settings: Settings) -> list[AlertRule]:
    a = settings.operations.alerts
    teams = [naming.team_names(t.name) for t in settings.governance.teams]
    # A training job's pods live in its team's namespace; without teams, anywhere.
    pods = f',namespace=~"{"|".join(t.namespace for t in teams)}"' if teams else ""
    rules = [
        AlertRule(
            "GpuXidError", "DCGM_FI_DEV_XID_ERRORS", "dcgm",
            # The gauge holds the last XID code a GPU reported; any non-zero value is a driver-reported fault.
            "DCGM_FI_DEV_XID_ERRORS > 0", 0, "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
        ),
        AlertRule(
            "GpuTemperatureHigh", "DCGM_FI_DEV_GPU_TEMP", "dcgm",
            f"DCGM_FI_DEV_GPU_TEMP > {a.gpu_temperature_celsius}", 5, "warning",
            f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.Hostname }}}} is at {{{{ $value }}}} C, above {a.gpu_temperature_celsius} C",
        ),
        AlertRule(
            "NodeNotReady", "kube_node_status_condition", "kube-state-metrics",
            'kube_node_status_condition{condition="Ready",status="true"} == 0', a.node_not_ready_minutes, "critical",
            f"Node {{{{ $labels.node }}}} has not been Ready for {a.node_not_ready_minutes} minutes",
        ),
        AlertRule(
            "TrainingPodsPending", "kube_pod_status_phase", "kube-state-metrics",
            f'sum by (namespace, pod) (kube_pod_status_phase{{phase="Pending"{pods}}}) > 0', a.pending_minutes, "warning",
            f"Pod {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} has been Pending for {a.pending_minutes} minutes",
        ),
    ]
    if teams and settings.addons.task_governance.enabled:
        queues = "|".join(t.cluster_queue for t in teams)
        window = a.starved_minutes
        rules.append(
            AlertRule(
                "TeamQueueStarved", "kueue_pending_workloads", "kueue",
                # Workloads wait in the queue and none was admitted in the whole window.
                f'sum by (cluster_queue) (kueue_pending_workloads{{cluster_queue=~"{queues}"}}) > 0 '
                f"unless on (cluster_queue) sum by (cluster_queue) (increase(kueue_admitted_workloads_total[{window}m])) > 0",
                window, "warning",
                f"Queue {{{{ $labels.cluster_queue }}}} has had pending workloads and admitted none for {window} minutes",
            )
        )
    return rules


def rule_groups_name(settings: Settings) -> str:
    return f"{settings.prefix}-{settings.env_name}-alerts"


def rule_groups_yaml(settings: Settings) -> str:
    """The Prometheus rules file (AWS::APS::RuleGroupsNamespace Data), as promtool reads it."""
    group = {"name": rule_groups_name(settings), "rules": [r.as_rule() for r in alert_rules(settings)]}
    return yaml.safe_dump({"groups": [group]}, sort_keys=False, width=1000)


# Alert manager: one SNS receiver with sigv4 (AMP requires its region; api_url and http_config
# are refused: "Configure alert manager to send messages to your Amazon SNS topic"). SNS caps a
# subject at 100 characters, so the subject names the alert and the cluster only.
ALERT_SUBJECT = "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}"
ALERT_MESSAGE = "{{ range .Alerts }}{{ .Annotations.summary }} (metric {{ .Annotations.metric }}, since {{ .StartsAt }})\n{{ end }}"
# AMP caps repeat_interval at five days; a day re-sends what still fires.
REPEAT_INTERVAL = "24h"


def alertmanager_config(settings: Settings) -> dict:
    return {
        "route": {"receiver": "operations", "group_by": ["alertname"], "repeat_interval": REPEAT_INTERVAL},
        "receivers": [
            {
                "name": "operations",
                "sns_configs": [
                    {
                        "topic_arn": topic_arn(settings),
                        "sigv4": {"region": settings.region},
                        "subject": f"{ALERT_SUBJECT} on {settings.hyperpod_cluster_name}",
                        "message": ALERT_MESSAGE,
                    }
                ],
            }
        ],
    }


class _Literal(str):
    pass


def _literal(dumper: yaml.SafeDumper, value: _Literal):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


_Dumper = type("_Dumper", (yaml.SafeDumper,), {})
_Dumper.add_representer(_Literal, _literal)


def alert_manager_definition(settings: Settings) -> str:
    """The workspace's AlertManagerDefinition: AMP's file format, `alertmanager_config` holding
    the standard alert manager YAML as a block."""
    inner = yaml.safe_dump(alertmanager_config(settings), sort_keys=False, width=1000)
    return yaml.dump({"alertmanager_config": _Literal(inner)}, Dumper=_Dumper, sort_keys=False, width=1000)
