"""The Stack every deployable stack derives from."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import Settings


class PlatformStack(cdk.Stack):
    """Names, env, tags and termination protection from the settings, and no AZ lookups.

    `ec2.Vpc(availability_zones=...)` still asks its stack for the region's AZs, which is a
    context lookup that needs credentials at synth. Answering from config keeps synth
    hermetic: the cloud assembly then has no `missing` context entries.
    """

    def __init__(self, scope: Construct, suffix: str, *, settings: Settings, description: str):
        super().__init__(
            scope,
            settings.stack_name(suffix),
            stack_name=settings.stack_name(suffix),
            env=cdk.Environment(account=settings.account, region=settings.region),
            termination_protection=settings.protection.termination_protection,
            description=f"{description} (hyperpod-cdk, env {settings.env_name})",
        )
        self.settings = settings
        for key, value in settings.all_tags.items():
            cdk.Tags.of(self).add(key, value)

    @property
    def availability_zones(self) -> list[str]:
        return list(self.settings.availability_zones)

    @property
    def data_removal_policy(self) -> cdk.RemovalPolicy:
        """What happens to buckets, keys and log groups when the stack is deleted."""
        return cdk.RemovalPolicy.RETAIN if self.settings.protection.retain_data else cdk.RemovalPolicy.DESTROY

    def log_group(self, id_: str, key: kms.IKey, name: str) -> logs.LogGroup:
        """A KMS-encrypted log group with the configured retention."""
        group = logs.LogGroup(self, id_, log_group_name=name, encryption_key=key, removal_policy=self.data_removal_policy)
        # Config allows exactly the values CloudWatch accepts; the L2 wants an enum member.
        group.node.default_child.retention_in_days = self.settings.protection.log_retention_days
        return group
