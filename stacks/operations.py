"""`<prefix>-<env>-operations`: who is told when the platform stops working.

HyperPod's cluster state changes, node health events and cluster events (EventBridge, source
aws.sagemaker) become one readable line each on an SNS topic; the observability add-on's
Prometheus workspace evaluates the alert rules and its alert manager publishes to the same
topic (both set beside the workspace, in the addons stack); FSx for Lustre's free capacity is
a CloudWatch alarm on it. The topic is encrypted with a key of its own, and its policy admits
only EventBridge, CloudWatch and Managed Prometheus acting for this account. With
`operations.notifications.topic_arn` an existing topic takes its place (its owner grants the
same publishers).

The stack deploys right before the addons stack (app.py): the alert manager names this topic,
so the topic exists before the definition that names it. Nothing is imported either way (the
topic by its name); an earlier version of this stack held the alert rules and imported the
workspace, and its update (which comes first) deletes them before the addons stack makes them
again beside the workspace, a few minutes without alert rules once.
"""

from __future__ import annotations

import hashlib

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra import alerting, naming
from infra.config import Settings
from infra.stack import PlatformStack
from stacks import storage

# FSx for Lustre's FreeDataStorageCapacity (AWS/FSx, dimension FileSystemId): its Sum is the
# bytes free in the whole file system ("Amazon FSx for Lustre metrics and dimensions").
FSX_NAMESPACE = "AWS/FSx"
FSX_FREE_METRIC = "FreeDataStorageCapacity"
FSX_PERIOD_MINUTES = 5
GIB = 1024**3


class OperationsStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings, after: PlatformStack):
        """`after`: the stack this one deploys after (the hyperpod stack): the addons stack, which
        deploys after this one, follows it right away."""
        super().__init__(scope, "operations", settings=settings, description="HyperPod events and alerts to people")
        self.add_stack_dependency(after)
        ops = settings.operations
        self.key = None
        if ops.notifications.topic_arn:
            self.topic = sns.Topic.from_topic_arn(self, "Topic", ops.notifications.topic_arn)
        else:
            self.topic = self._topic()
        for email in ops.notifications.emails:
            # Named by the address, not its place in the list: removing one address must not
            # replace (and so re-confirm) the subscriptions after it.
            digest = hashlib.sha256(email.lower().encode()).hexdigest()[:10]
            sns.CfnSubscription(self, f"Email{digest}", topic_arn=self.topic.topic_arn, protocol="email", endpoint=email)
        self.rules = {rule.id_: self._event_rule(rule) for rule in alerting.event_rules(settings)}
        if ops.alerts.enabled and settings.fsx.enabled and settings.fsx.existing is None:
            self._fsx_alarm()
        cdk.CfnOutput(self, "TopicArn", value=self.topic.topic_arn, description="Where HyperPod events and alerts are published")

    def _topic(self) -> sns.Topic:
        s = self.settings
        self.key = self.data_key("TopicKey", "operations", "Encrypts the operations topic's messages")
        topic = sns.Topic(
            self,
            "Topic",
            topic_name=naming.operations_topic_name(s.prefix, s.env_name),
            display_name=f"HyperPod {s.env_name}",
            master_key=self.key,
            enforce_ssl=True,
        )
        account = self.account
        workspace = f"arn:{self.partition}:aps:{self.region}:{account}:workspace/*"
        publishers = (
            # Confused-deputy conditions as each service's SNS page gives them: the account, and
            # for alarms and workspaces the source's ARN within it.
            ("EventBridge", "events.amazonaws.com", {"ArnLike": {"aws:SourceArn": f"arn:{self.partition}:events:{self.region}:{account}:rule/*"}}),
            ("CloudWatchAlarms", "cloudwatch.amazonaws.com", {"ArnLike": {"aws:SourceArn": f"arn:{self.partition}:cloudwatch:{self.region}:{account}:alarm:*"}}),
            ("ManagedPrometheus", "aps.amazonaws.com", {"ArnLike": {"aws:SourceArn": workspace}}),
        )
        for sid, principal, source in publishers:
            topic.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    principals=[iam.ServicePrincipal(principal)],
                    # Alert manager reads the topic's attributes before it publishes (AMP's SNS permission page).
                    actions=["sns:Publish", "sns:GetTopicAttributes"] if principal.startswith("aps") else ["sns:Publish"],
                    resources=[topic.topic_arn],
                    conditions={"StringEquals": {"aws:SourceAccount": account}, **source},
                )
            )
            # An encrypted topic: the publisher makes the data key (SNS's key-management page,
            # "AWS KMS permissions"; AMP's page gives the same two actions for aps).
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"{sid}PublishesEncrypted",
                    principals=[iam.ServicePrincipal(principal)],
                    actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                    resources=["*"],
                )
            )
        return topic

    def _event_rule(self, rule: alerting.EventRule) -> events.CfnRule:
        # The L1 rule: the L2 SNS target would add its own grant without the conditions above.
        return events.CfnRule(
            self,
            f"{rule.id_}Rule",
            description=f"{rule.detail_type} of {self.settings.hyperpod_cluster_name}, as one line to the operations topic",
            event_pattern=alerting.event_pattern(rule, self.settings),
            state="ENABLED",
            targets=[
                events.CfnRule.TargetProperty(
                    id="OperationsTopic",
                    arn=self.topic.topic_arn,
                    input_transformer=events.CfnRule.InputTransformerProperty(
                        input_paths_map=dict(rule.paths), input_template=alerting.input_template(rule)
                    ),
                )
            ],
        )

    def _fsx_alarm(self) -> cloudwatch.CfnAlarm:
        s = self.settings
        # The id the cluster stack writes, resolved at each deploy (only the id: an unused
        # SSM parameter is a template warning).
        file_system_id = ssm.StringParameter.value_for_string_parameter(self, storage.parameter_name(s, "file-system-id"))
        free_bytes = s.fsx.storage_gib * GIB * s.operations.alerts.fsx_free_percent // 100
        return cloudwatch.CfnAlarm(
            self,
            "FsxFreeCapacity",
            alarm_description=f"FSx for Lustre {s.fsx.storage_gib} GiB: less than {s.operations.alerts.fsx_free_percent}% free",
            namespace=FSX_NAMESPACE,
            metric_name=FSX_FREE_METRIC,
            dimensions=[cloudwatch.CfnAlarm.DimensionProperty(name="FileSystemId", value=file_system_id)],
            statistic="Sum",
            period=FSX_PERIOD_MINUTES * 60,
            evaluation_periods=2,
            threshold=free_bytes,
            comparison_operator="LessThanThreshold",
            treat_missing_data="missing",
            alarm_actions=[self.topic.topic_arn],
            ok_actions=[self.topic.topic_arn],
        )
