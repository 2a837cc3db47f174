"""Events and alerts against outside truths, without a synth: each EventBridge pattern against
AWS's published example events (tests/fixtures/hyperpod_eventbridge_events.json, its source
inside), matched by moto's EventBridge pattern matcher; the alert rules through Prometheus'
own promtool, each reading a metric of the observability add-on's documented sets
(tests/fixtures/observability_metric_sets.json); the alert manager definition in AMP's format."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml
from moto.events.models import EventPattern

from infra import alerting, validation
from tests.conftest import CONTEXT, ROOT

EVENTS = json.loads((ROOT / "tests" / "fixtures" / "hyperpod_eventbridge_events.json").read_text())
METRIC_SETS = json.loads((ROOT / "tests" / "fixtures" / "observability_metric_sets.json").read_text())
EXAMPLE_OF = {"ClusterStateChange": "cluster_state_change", "NodeHealth": "node_health", "ClusterEvent": "cluster_event_error"}


def _prod(**patch):
    settings, _ = validation.load_settings(CONTEXT, "prod")
    return validation.override(settings, patch)[0] if patch else settings


# AWS's examples name their cluster sample-cluster; prod's rules, renamed so, must take them.
SAMPLE = _prod(hyperpod={"cluster_name": "sample-cluster"})


def _matches(pattern: dict, event: dict) -> bool:
    return EventPattern(json.dumps(pattern), pattern).matches_event(event)


def _with(event: dict, path: tuple[str, ...], value) -> dict:
    copy = json.loads(json.dumps(event))
    inner = copy
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return copy


def test_prod_has_a_rule_for_each_hyperpod_event_type_aws_documents():
    assert {r.detail_type for r in alerting.event_rules(SAMPLE)} == {e["detail-type"] for e in EVENTS.values() if isinstance(e, dict)}


@pytest.mark.parametrize("rule", alerting.EVENT_RULES, ids=lambda r: r.id_)
def test_each_rule_takes_aws_example_event_of_its_type(rule):
    assert _matches(alerting.event_pattern(rule, SAMPLE), EVENTS[EXAMPLE_OF[rule.id_]])


@pytest.mark.parametrize("rule", alerting.EVENT_RULES, ids=lambda r: r.id_)
def test_each_rule_leaves_other_clusters_and_other_types_alone(rule):
    pattern = alerting.event_pattern(rule, SAMPLE)
    example = EVENTS[EXAMPLE_OF[rule.id_]]
    assert not _matches(pattern, _with(example, ("detail", *rule.cluster_name_at), "another-cluster"))
    for name, other in EVENTS.items():
        if isinstance(other, dict) and other["detail-type"] != rule.detail_type:
            assert not _matches(pattern, other), name


def test_cluster_events_are_sent_only_at_the_configured_levels():
    rule = next(r for r in alerting.EVENT_RULES if r.id_ == "ClusterEvent")
    pattern = alerting.event_pattern(rule, SAMPLE)
    error = EVENTS["cluster_event_error"]
    assert _matches(pattern, _with(error, ("detail", "EventDetails", "EventLevel"), "Warn"))
    assert not _matches(pattern, _with(error, ("detail", "EventDetails", "EventLevel"), "Info"))
    # The user guide's lifecycle-script example carries no level at all.
    assert not _matches(pattern, EVENTS["cluster_event_lifecycle_script"])
    infos = _prod(hyperpod={"cluster_name": "sample-cluster"}, operations={"notifications": {"cluster_event_levels": ["Info"]}})
    assert _matches(alerting.event_pattern(rule, infos), _with(error, ("detail", "EventDetails", "EventLevel"), "Info"))


def test_cluster_events_need_continuous_provisioning_so_dev_has_no_such_rule():
    dev, _ = validation.load_settings(CONTEXT, "dev")
    assert "ClusterEvent" not in {r.id_ for r in alerting.event_rules(dev)}


def _transform(rule: alerting.EventRule, event: dict) -> str:
    """What EventBridge's input transformer makes of `event`: each <name> takes its JSON path's value."""
    values = {}
    for name, path in rule.paths.items():
        value = event
        for key in path.removeprefix("$.").split("."):
            value = value[key]  # a KeyError here: a path the documented event does not have
        values[name] = value
    return re.sub(r"<(\w+)>", lambda m: str(values[m.group(1)]), json.loads(alerting.input_template(rule)))


def test_the_mail_says_which_node_is_unhealthy_why_and_what_to_do():
    rule = next(r for r in alerting.EVENT_RULES if r.id_ == "NodeHealth")
    assert _transform(rule, EVENTS["node_health"]) == (
        "HyperPod cluster sample-cluster: node i-12345678abcdefghi is Unhealthy (2021-10-25T01:52:12Z). "
        "HyperPod Health Monitoring Agent (HMA) has detected fault type NvidiaErrorTerminate on this node and is unhealthy. "
        "Repair action: None. Please Replace the Faulty Node."
    )


@pytest.mark.parametrize("rule", alerting.EVENT_RULES, ids=lambda r: r.id_)
def test_every_field_a_mail_line_reads_is_in_the_documented_event(rule):
    line = _transform(rule, EVENTS[EXAMPLE_OF[rule.id_]])
    assert "sample-cluster" in line and "<" not in line


def _tool(name: str, package: str) -> str:
    """Prometheus' own checkers, from Debian's packages (.ci/run installs them; CI fails without them)."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs Debian's {package}")
        pytest.skip(f"{name} not installed (apt-get install {package})")
    return found


def _promtool() -> str:
    return _tool("promtool", "prometheus")


@pytest.mark.parametrize(
    "name, patch",
    [("prod", {}), ("no teams", {"governance": {"teams": []}, "sample_job": {"enabled": False}})],
)
def test_promtool_accepts_the_alert_rules(tmp_path, name, patch):
    settings = _prod(**patch)
    rules = tmp_path / "rules.yaml"
    rules.write_text(alerting.rule_groups_yaml(settings))
    result = subprocess.run([_promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerting.alert_rules(settings))} rules found" in result.stdout


def test_promtool_would_refuse_a_broken_rule(tmp_path):
    """The check above can fail: promtool reads the expressions, not only the YAML."""
    rules = tmp_path / "rules.yaml"
    text = alerting.rule_groups_yaml(_prod()).replace("DCGM_FI_DEV_XID_ERRORS > 0", "DCGM_FI_DEV_XID_ERRORS >")
    rules.write_text(text)
    assert subprocess.run([_promtool(), "check", "rules", str(rules)], capture_output=True, timeout=60).returncode != 0


def test_the_rules_cover_gpus_nodes_pods_and_team_queues():
    assert [r.name for r in alerting.alert_rules(_prod())] == [
        "GpuXidError", "GpuTemperatureHigh", "NodeNotReady", "TrainingPodsPending", "TeamQueueStarved",
    ]


@pytest.mark.parametrize("rule", alerting.alert_rules(_prod()), ids=lambda r: r.name)
def test_each_rule_reads_a_metric_the_observability_add_on_documents(rule):
    documented = set(METRIC_SETS[rule.source]["metrics"])
    assert rule.metric in documented
    # Every metric in the expression, not only the one the rule names.
    read = set(re.findall(r"\b(DCGM_FI_\w+|kube_\w+|kueue_\w+)\b", rule.expr))
    assert rule.metric in read and read <= documented, read - documented


def test_the_limits_come_from_config():
    settings = _prod(operations={"alerts": {"enabled": True, "pending_minutes": 7, "starved_minutes": 90, "gpu_temperature_celsius": 80}})
    rules = {r.name: r.as_rule() for r in alerting.alert_rules(settings)}
    assert rules["TrainingPodsPending"]["for"] == "7m"
    assert rules["TeamQueueStarved"]["for"] == "90m" and "[90m]" in rules["TeamQueueStarved"]["expr"]
    assert rules["GpuTemperatureHigh"]["expr"] == "DCGM_FI_DEV_GPU_TEMP > 80"


def test_pending_pods_are_watched_in_the_team_namespaces():
    expr = next(r.expr for r in alerting.alert_rules(_prod()) if r.name == "TrainingPodsPending")
    assert 'namespace=~"hyperpod-ns-ml-research|hyperpod-ns-ml-production"' in expr


def test_alert_manager_sends_to_the_operations_topic_with_sigv4_in_the_region():
    settings = _prod()
    outer = yaml.safe_load(alerting.alert_manager_definition(settings))
    assert list(outer) == ["alertmanager_config"]
    inner = yaml.safe_load(outer["alertmanager_config"])
    [receiver] = inner["receivers"]
    assert inner["route"]["receiver"] == receiver["name"]
    [sns] = receiver["sns_configs"]
    assert sns["topic_arn"] == "arn:aws:sns:us-east-1:111111111111:hyperpod-prod-operations"
    assert sns["sigv4"] == {"region": "us-east-1"}
    # AMP refuses these two ("Configure alert manager to send messages to your Amazon SNS topic").
    assert "api_url" not in sns and "http_config" not in sns
    given = _prod(operations={"notifications": {"topic_arn": "arn:aws:sns:us-east-1:111111111111:chatbot"}})
    assert "arn:aws:sns:us-east-1:111111111111:chatbot" in alerting.alert_manager_definition(given)


def test_alert_manager_repeats_within_amp_five_day_cap():
    assert alerting.REPEAT_INTERVAL.endswith("h") and int(alerting.REPEAT_INTERVAL[:-1]) <= 5 * 24


def test_amtool_accepts_the_alert_manager_configuration(tmp_path):
    amtool = _tool("amtool", "prometheus-alertmanager")
    config_file = tmp_path / "alertmanager.yml"
    config_file.write_text(yaml.safe_load(alerting.alert_manager_definition(_prod()))["alertmanager_config"])
    result = subprocess.run([amtool, "check-config", str(config_file)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_operations_page_shows_the_mail_prod_would_send_for_aws_example_node_event():
    from tests import doc_pages

    rule = next(r for r in alerting.EVENT_RULES if r.id_ == "NodeHealth")
    event = _with(EVENTS["node_health"], ("detail", "ClusterName"), _prod().hyperpod_cluster_name)
    assert _transform(rule, event) in doc_pages.text("operations.md")
