"""Operations' checks: the notifications (addresses, event levels, a topic in the cluster's own
region) and alerts that would reach nobody."""

from __future__ import annotations

from infra import naming
from infra.config.base import Problems, duplicates
from infra.config.operations import EVENT_LEVELS, TOPIC_ARN
from infra.config.settings import Settings


def check_operations(s: Settings, p: Problems) -> None:
    ops = s.operations
    n = ops.notifications
    # Each address against the SMTP mailbox grammar: infra/config/limits.py.
    for email in duplicates(e.lower() for e in n.emails):
        p.error("operations.notifications.emails", email, "is listed twice; SNS keeps one subscription per address")
    if not n.cluster_event_levels:
        p.error("operations.notifications.cluster_event_levels", [], f"names no level; EventBridge refuses an empty list (levels: {', '.join(EVENT_LEVELS)})")
    for level in duplicates(n.cluster_event_levels):
        p.error("operations.notifications.cluster_event_levels", level, f"is listed twice; levels: {', '.join(EVENT_LEVELS)}")
    if n.topic_arn is not None:
        found = TOPIC_ARN.match(n.topic_arn)
        if not found:
            p.error(
                "operations.notifications.topic_arn",
                n.topic_arn,
                "is not an SNS topic ARN, arn:<partition>:sns:<region>:<account>:<topic-name>",
            )
        elif found.group(5):
            p.error("operations.notifications.topic_arn", n.topic_arn, "is a FIFO topic; EventBridge and alert manager publish to standard topics")
        elif found.group(2) != s.region or found.group(1) != naming.partition(s.region):
            # EventBridge rules target SNS topics in their own region, and alert manager's sigv4 signs for one.
            p.error("operations.notifications.topic_arn", n.topic_arn, f"is not in {s.region}, the cluster's region; EventBridge publishes only to topics in its own region")
    # That alert rules need observability, and its workspace ours: infra/prerequisites.py.
    if ops.alerts.enabled and not (n.emails or n.topic_arn):
        p.warn("operations.alerts.enabled: alerts go to the operations topic, which has no subscriber; add operations.notifications.emails or subscribe to the topic after deploy")
