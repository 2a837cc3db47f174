"""Operations stack: HyperPod's events and the alerts reach one encrypted topic that only
EventBridge, CloudWatch and Managed Prometheus of this account may publish to, and from it the
addresses config names; prod has it, dev does not."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Match

from infra import alerting, cfn_schema
from stacks import storage
from tests.conftest import ROOT

PUBLISHERS = {"events.amazonaws.com", "cloudwatch.amazonaws.com", "aps.amazonaws.com"}
METRIC_SETS = json.loads((ROOT / "tests" / "fixtures" / "observability_metric_sets.json").read_text())


def _only(resources: dict) -> dict:
    [resource] = resources.values()
    return resource


def test_dev_has_no_operations_stack_and_no_alert_manager(synth):
    s = synth("dev")
    assert "operations" not in s.templates
    workspace = _only(s.resources("addons", "AWS::APS::Workspace"))
    assert "AlertManagerDefinition" not in workspace["Properties"]


def _after(manifest: dict, stack: str) -> set[str]:
    """Every stack `stack` deploys after (the cloud assembly's dependencies, followed)."""
    seen, todo = set(), [stack]
    while todo:
        for dep in manifest["artifacts"][todo.pop()].get("dependencies", []):
            if dep not in seen and manifest["artifacts"].get(dep, {}).get("type") == "aws:cloudformation:stack":
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_alert_manager_is_created_after_the_topic_it_names(synth):
    # The workspace's AlertManagerDefinition names the operations topic's ARN; whether
    # CreateAlertManagerDefinition checks its receiver cannot be read offline, so the topic comes
    # first: the stack that holds the definition deploys after the stack that creates the topic.
    s = synth("prod")
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    [(_, workspace)] = s.resources("addons", "AWS::APS::Workspace").items()
    assert alerting.topic_arn(s.settings) in workspace["Properties"]["AlertManagerDefinition"]
    topic = _only(s.resources("operations", "AWS::SNS::Topic"))["Properties"]
    assert alerting.topic_arn(s.settings).endswith(f":{topic['TopicName']}")
    assert "hyperpod-prod-operations" in _after(manifest, "hyperpod-prod-addons")
    assert "hyperpod-prod-addons" not in _after(manifest, "hyperpod-prod-operations")
    # Right before it, so an update that moves what the two hold is a few minutes apart.
    stacks = [d for d in manifest["artifacts"]["hyperpod-prod-operations"]["dependencies"] if not d.endswith(".assets")]
    assert stacks == ["hyperpod-prod-hyperpod"]


def test_topic_is_encrypted_with_its_own_rotating_key(synth):
    s = synth("prod")
    topic = _only(s.resources("operations", "AWS::SNS::Topic"))["Properties"]
    [(key_id, key)] = s.resources("operations", "AWS::KMS::Key").items()
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    services = {
        st["Principal"]["Service"]: set(st["Action"])
        for st in key["Properties"]["KeyPolicy"]["Statement"]
        if "Service" in st.get("Principal", {})
    }
    # SNS's key-management page: a publisher to an encrypted topic needs these two actions.
    assert services == {p: {"kms:GenerateDataKey*", "kms:Decrypt"} for p in PUBLISHERS}


def test_topic_admits_only_eventbridge_cloudwatch_and_prometheus_of_this_account(synth):
    s = synth("prod")
    policy = _only(s.resources("operations", "AWS::SNS::TopicPolicy"))["Properties"]["PolicyDocument"]
    allows = [st for st in policy["Statement"] if st["Effect"] == "Allow"]
    assert {st["Principal"]["Service"] for st in allows} == PUBLISHERS
    assert all("AWS" not in st["Principal"] for st in allows)
    for st in allows:
        assert st["Condition"]["StringEquals"] == {"aws:SourceAccount": s.settings.account}, st
        assert f":{s.settings.account}:" in st["Condition"]["ArnLike"]["aws:SourceArn"], st
    denies = [st for st in policy["Statement"] if st["Effect"] == "Deny"]
    assert denies and denies[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_prod_mails_the_example_address(synth):
    synth("prod").template("operations").has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com", "TopicArn": {"Ref": Match.any_value()}}
    )


GIVEN_TOPIC = "arn:aws:sns:us-east-1:111111111111:team-chatbot"
# One variant of prod for both tests below: an existing topic, and an address before prod's.
EXISTING_TOPIC_TWO_ADDRESSES = {"operations": {"notifications": {"topic_arn": GIVEN_TOPIC, "emails": ["oncall@example.com", "ops@example.com"]}}}


def test_removing_an_address_keeps_the_other_subscriptions(synth):
    """A subscription's id comes from its address: the others keep theirs (no re-confirmation)."""
    two = synth("prod", EXISTING_TOPIC_TWO_ADDRESSES)
    ids = {r["Properties"]["Endpoint"]: k for k, r in two.resources("operations", "AWS::SNS::Subscription").items()}
    [(one_id, one)] = synth("prod").resources("operations", "AWS::SNS::Subscription").items()
    assert ids["ops@example.com"] == one_id and one["Properties"]["Endpoint"] == "ops@example.com"


def test_each_event_rule_is_the_tested_pattern_and_writes_one_line_to_the_topic(synth):
    s = synth("prod")
    rules = s.resources("operations", "AWS::Events::Rule")
    [(topic_id, _)] = s.resources("operations", "AWS::SNS::Topic").items()
    assert len(rules) == len(alerting.event_rules(s.settings)) == 3
    for rule in alerting.event_rules(s.settings):
        props = rules[f"{rule.id_}Rule"]["Properties"]
        assert props["EventPattern"] == alerting.event_pattern(rule, s.settings)
        assert props["EventPattern"]["detail"] != {}  # this cluster's only
        [target] = props["Targets"]
        assert target["Arn"] == {"Ref": topic_id}
        assert target["InputTransformer"] == {"InputPathsMap": rule.paths, "InputTemplate": alerting.input_template(rule)}
        # EventBridge's limits on an input transformer (cfn-lint's schema for the property).
        schema = cfn_schema.definition("AWS::Events::Rule", "InputTransformer")["properties"]
        assert len(rule.paths) <= schema["InputPathsMap"].get("maxProperties", 100)


def test_alert_rules_go_to_the_workspace_the_observability_add_on_made(synth):
    s = synth("prod")
    namespace = _only(s.resources("addons", "AWS::APS::RuleGroupsNamespace"))["Properties"]
    assert namespace["Data"] == alerting.rule_groups_yaml(s.settings)
    [(workspace_id, _)] = s.resources("addons", "AWS::APS::Workspace").items()
    assert namespace["Workspace"] == {"Fn::GetAtt": [workspace_id, "Arn"]}
    assert s.resources("operations", "AWS::APS::RuleGroupsNamespace") == {}


def test_the_workspace_alert_manager_names_the_topic_the_operations_stack_creates(synth):
    s = synth("prod")
    workspace = _only(s.resources("addons", "AWS::APS::Workspace"))["Properties"]
    assert workspace["AlertManagerDefinition"] == alerting.alert_manager_definition(s.settings)
    topic = _only(s.resources("operations", "AWS::SNS::Topic"))["Properties"]
    assert alerting.topic_arn(s.settings).endswith(f":{s.settings.account}:{topic['TopicName']}")
    assert f"arn:aws:sns:{s.settings.region}:" in alerting.topic_arn(s.settings)


def test_fsx_capacity_is_a_cloudwatch_alarm_on_the_file_system_to_the_topic(synth):
    s = synth("fsx")
    alarm = _only(s.resources("operations", "AWS::CloudWatch::Alarm"))["Properties"]
    fsx = METRIC_SETS["fsx-cloudwatch"]
    assert alarm["Namespace"] == fsx["namespace"] and alarm["MetricName"] in fsx["metrics"]
    assert alarm["MetricName"] == "FreeDataStorageCapacity" and alarm["Statistic"] == "Sum"
    # 10 % of the 2400 GiB the fsx config creates, in bytes.
    assert alarm["Threshold"] == 2400 * 1024**3 // 10 and alarm["ComparisonOperator"] == "LessThanThreshold"
    [dimension] = alarm["Dimensions"]
    assert dimension["Name"] == "FileSystemId"
    # The id the cluster stack writes, read at each deploy through an SSM parameter type.
    parameter = s.templates["operations"]["Parameters"][dimension["Value"]["Ref"]]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<String>"
    assert parameter["Default"] == f"/hyperpod/dev/fsx/{storage.FIELDS[0]}"
    assert len(s.templates["operations"]["Parameters"]) == 2  # that one and CDK's bootstrap version
    [(topic_id, _)] = s.resources("operations", "AWS::SNS::Topic").items()
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]


def test_without_fsx_there_is_no_capacity_alarm(synth):
    assert synth("prod").resources("operations", "AWS::CloudWatch::Alarm") == {}


def test_an_existing_topic_takes_the_place_of_ours(synth):
    given = GIVEN_TOPIC
    s = synth("prod", EXISTING_TOPIC_TWO_ADDRESSES)
    assert s.resources("operations", "AWS::SNS::Topic") == {}
    assert s.resources("operations", "AWS::KMS::Key") == {}
    for rule in s.resources("operations", "AWS::Events::Rule").values():
        assert rule["Properties"]["Targets"][0]["Arn"] == given
    assert [r["Properties"]["TopicArn"] for r in s.resources("operations", "AWS::SNS::Subscription").values()] == [given, given]
    assert given in _only(s.resources("addons", "AWS::APS::Workspace"))["Properties"]["AlertManagerDefinition"]


def test_review_counts_the_new_resources_and_places_the_stack_in_the_deploy_order(synth):
    from cli.review import report as review

    report = review.build(synth("prod").outdir, with_lint=False, with_cdk_diff=False)
    names = [st["name"] for st in report["stacks"]]
    assert names.index("hyperpod-prod-hyperpod") < names.index("hyperpod-prod-operations") < names.index("hyperpod-prod-addons")
    ops = next(st for st in report["stacks"] if st["name"] == "hyperpod-prod-operations")
    assert ops["by_type"]["AWS::Events::Rule"] == 3 and "AWS::APS::RuleGroupsNamespace" not in ops["by_type"]
    assert ops["imports_from"] == {}
    # The deploy plan places it: it starts when the hyperpod stack is done, and the addons stack after it.
    spans = {sp["stack"]: sp for sp in report["deploy_plan"]["stacks"]}
    assert spans["hyperpod-prod-operations"]["start"] == spans["hyperpod-prod-hyperpod"]["end"]
    assert spans["hyperpod-prod-addons"]["start"] == spans["hyperpod-prod-operations"]["end"] > spans["hyperpod-prod-operations"]["start"]
    assert max(sp["end"] for sp in spans.values()) == pytest.approx(report["deploy_plan"]["minutes"], abs=0.5)
    assert "hyperpod-prod-operations 1" in review.to_markdown(report)


def test_switching_operations_off_keeps_every_export_it_imports(synth):
    """A strong reference's export goes with its consumer, and CloudFormation refuses the
    producer's update while the deployed consumer still imports it (FACTS). The operations
    stack imports nothing now; the workspace ARN an earlier one imported stays exported, also in
    dev without the stack, until every deployed operations stack has been updated."""
    prod, dev = synth("prod"), synth("dev")
    assert not re.findall(r'"Fn::ImportValue"', json.dumps(prod.templates["operations"]))
    [(workspace_id, _)] = dev.resources("addons", "AWS::APS::Workspace").items()
    exported = [o["Value"] for o in dev.templates["addons"].get("Outputs", {}).values() if "Export" in o]
    assert {"Fn::GetAtt": [workspace_id, "Arn"]} in exported
