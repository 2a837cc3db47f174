"""Operations: who is told when the platform stops working (HyperPod's events through
EventBridge, alert rules on the observability add-on's metrics, FSx capacity), and the
limits those rules take."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field

from infra.config.base import Model


# An SNS topic's ARN (the Service Authorization Reference: arn:${Partition}:sns:${Region}:${Account}:${TopicName};
# topic names are 1-256 letters, digits, hyphens and underscores, .fifo for FIFO topics).
TOPIC_ARN = re.compile(r"^arn:(aws[a-z-]*):sns:([a-z0-9-]+):(\d{12}):([A-Za-z0-9_-]{1,256})(\.fifo)?$")
# HyperPod cluster events' severities (the cluster events reference, "Event levels").
EVENT_LEVELS = ("Info", "Warn", "Error")


class Notifications(Model):
    """Where HyperPod's events and the alerts go: e-mail addresses on the topic this project
    creates (each confirms once, from the mail SNS sends), and/or an existing SNS topic (an
    AWS Chatbot or incident tool subscribed to it) used instead of creating one."""

    emails: tuple[str, ...] = Field(
        default=(),
        description="Addresses subscribed to the operations topic (each confirms once, from SNS's mail); any address or "
        "`topic_arn` creates the operations stack.",
    )
    topic_arn: Optional[str] = Field(
        default=None,
        description="An existing standard SNS topic in the cluster's region (AWS Chatbot, an incident tool) used instead of "
        "creating one; its owner grants the publishers (docs/operations.md, An existing topic).",
    )
    cluster_event_levels: tuple[Literal["Info", "Warn", "Error"], ...] = Field(
        default=("Warn", "Error"), description="Which HyperPod cluster events are sent (clusters with continuous provisioning emit them)."
    )


class Alerts(Model):
    """Managed Prometheus alert rules on the observability add-on's metrics, and the FSx
    capacity alarm; each limit is what its rule waits for before telling anyone."""

    enabled: bool = Field(
        default=False,
        description="Managed Prometheus alert rules and their alert manager, and the FSx capacity alarm (needs "
        "`addons.observability.enabled`).",
    )
    gpu_temperature_celsius: int = Field(default=85, ge=50, le=120, description="A GPU hotter than this for 5 minutes alerts.")
    node_not_ready_minutes: int = Field(default=10, ge=1, le=1440, description="A node not Ready this long alerts.")
    pending_minutes: int = Field(default=30, ge=1, le=1440, description="A training pod (in a team namespace) Pending this long alerts.")
    starved_minutes: int = Field(
        default=60, ge=1, le=1440, description="A team queue with pending workloads that admitted none this long alerts."
    )
    fsx_free_percent: int = Field(
        default=10, ge=1, le=90, description="The FSx file system this project creates with less free than this share alerts."
    )


class OperationsSettings(Model):
    notifications: Notifications = Field(
        default=Notifications(),
        description="Where HyperPod's events and the alerts go: e-mail addresses on the topic this project creates, and/or an "
        "existing SNS topic.",
    )
    alerts: Alerts = Field(
        default=Alerts(),
        description="Managed Prometheus alert rules on the observability add-on's metrics, and the FSx capacity alarm; each "
        "threshold is what its rule waits for before telling anyone.",
    )

    @property
    def enabled(self) -> bool:
        """Whether the operations stack exists: someone is to be told, or alerts are on."""
        n = self.notifications
        return bool(n.emails or n.topic_arn or self.alerts.enabled)
