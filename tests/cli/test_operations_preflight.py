"""preflight on an existing operations topic (moto's SNS): it must exist and admit the services
that publish to it in this config; the stack grants them only on a topic it creates."""

from __future__ import annotations

import json

from cli import preflight
from infra import validation
from tests.cli.test_preflight import aws  # noqa: F401  (the moto account the preflight tests use)
from tests.conftest import patched_context


def _settings(topic_arn: str, alerts: bool = True):
    patch = {"operations": {"notifications": {"topic_arn": topic_arn}, "alerts": {"enabled": alerts}}}
    return validation.load_settings(patched_context("dev", patch), "dev")[0]


def _topic(aws, services=(), **attributes) -> str:
    arn = aws("sns").create_topic(Name="team-chatbot", Attributes=attributes)["TopicArn"]
    statements = [
        {"Effect": "Allow", "Principal": {"Service": s}, "Action": "sns:Publish", "Resource": arn,
         "Condition": {"StringEquals": {"aws:SourceAccount": "111111111111"}}}
        for s in services
    ]
    if statements:
        aws("sns").set_topic_attributes(TopicArn=arn, AttributeName="Policy",
                                        AttributeValue=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    return arn


def test_no_existing_topic_no_check(aws):
    settings = validation.load_settings(patched_context("dev", {}), "dev")[0]
    assert preflight.check_operations_topic(settings, aws) == []


def test_a_topic_that_admits_eventbridge_and_prometheus_passes(aws):
    arn = _topic(aws, ["events.amazonaws.com", "aps.amazonaws.com"])
    [result] = preflight.check_operations_topic(_settings(arn), aws)
    assert result.status == "pass", result


def test_a_topic_with_sns_default_policy_fails_naming_the_missing_publishers(aws):
    arn = _topic(aws)  # SNS's default policy: the owner account's principals only
    [result] = preflight.check_operations_topic(_settings(arn), aws)
    assert result.status == "fail"
    assert "aps.amazonaws.com, events.amazonaws.com" in result.detail and result.action


def test_events_only_need_eventbridge(aws):
    arn = _topic(aws, ["events.amazonaws.com"])
    [result] = preflight.check_operations_topic(_settings(arn, alerts=False), aws)
    assert result.status == "pass"


def test_an_encrypted_topic_warns_about_its_key_policy(aws):
    arn = _topic(aws, ["events.amazonaws.com", "aps.amazonaws.com"], KmsMasterKeyId="alias/team-key")
    [result] = preflight.check_operations_topic(_settings(arn), aws)
    assert result.status == "warn" and "kms:GenerateDataKey*" in result.action


def test_a_missing_topic_fails(aws):
    [result] = preflight.check_operations_topic(_settings("arn:aws:sns:us-east-1:111111111111:nobody-made-this"), aws)
    assert result.status == "fail" and "does not exist" in result.detail


def test_preflight_runs_the_check():
    assert preflight.check_operations_topic in preflight.CHECKS
