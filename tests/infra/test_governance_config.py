"""Governance and topology validation: refused before anything is deployed."""

from __future__ import annotations

import pytest

from infra import config, validation
from tests.conftest import patched_context

PROD_GPU = "ml.p5.48xlarge"


def _team(name, count=1, itype="ml.g5.8xlarge", **extra):
    return {"name": name, "quotas": [{"instance_type": itype, "count": count}], **extra}


def problems(patch, env="dev"):
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context(env, patch), env)
    return exc.value.problems


def warnings(patch, env="dev"):
    return validation.load_settings(patched_context(env, patch), env)[1]


def test_quota_for_a_type_no_group_provides():
    lines = problems({"governance": {"teams": [_team("ml-research", itype="ml.p4d.24xlarge")]}})
    assert any("governance.teams[0].quotas[0].instance_type: 'ml.p4d.24xlarge' is provided by no instance group" in l for l in lines)


def test_quota_larger_than_the_cluster():
    lines = problems({"governance": {"teams": [_team("ml-research", count=5)]}})
    assert "dev: governance.teams[0].quotas[0].count: 5 is more than the cluster's 1 instance of ml.g5.8xlarge" in lines


def test_quotas_adding_up_above_capacity_need_intent_and_then_warn_naming_the_teams():
    teams = [_team("ml-research", count=3, itype=PROD_GPU), _team("ml-production", count=3, itype=PROD_GPU)]
    lines = problems({"governance": {"teams": teams}}, env="prod")
    assert any("quotas for ml.p5.48xlarge add up to 6 instances, above the cluster's 4 instances (teams: ml-research, ml-production)" in l for l in lines)
    # One line for the type, though the instances bring their GPUs, vCPUs and memory along.
    assert sum("quotas for ml.p5.48xlarge add up" in l for l in lines) == 1
    ws = warnings({"governance": {"teams": teams, "allow_oversubscription": True}}, env="prod")
    assert any("ml-research, ml-production" in w and "allowed by governance.allow_oversubscription" in w for w in ws)


def test_duplicate_team_names():
    lines = problems({"governance": {"teams": [_team("ml-research"), _team("ml-research")], "allow_oversubscription": True}})
    assert any("governance.teams: 'ml-research' is defined twice" in l for l in lines)


@pytest.mark.parametrize("name", ["ML_Research", "team-" + "x" * 40, "-lead"])
def test_team_names_that_break_namespace_or_cloudformation_rules(name):
    lines = problems({"governance": {"teams": [_team(name)]}, "sample_job": {"team": None}})
    assert any(l.startswith(f"dev: governance.teams[0].name: {name!r}") for l in lines)


def test_more_than_ten_priority_classes():
    classes = [{"name": f"p{i}", "weight": i} for i in range(11)]
    lines = problems({"governance": {"priority_classes": classes}, "sample_job": {"priority": None}})
    # The limit is the scheduler config schema's maxItems (infra/config/limits.py), not a copy.
    assert "dev: governance.priority_classes: 11 items; at most 10 (AWS::SageMaker::ClusterSchedulerConfig SchedulerConfig.PriorityClasses)" in lines


def test_priority_weight_outside_0_to_100_and_duplicates():
    lines = problems({"governance": {"priority_classes": [{"name": "a", "weight": 101}, {"name": "a", "weight": -1}]},
                      "sample_job": {"priority": None}})
    assert any("governance.priority_classes[0].weight: 101 is above the maximum 100 (AWS::SageMaker::ClusterSchedulerConfig" in l for l in lines)
    assert any("governance.priority_classes[1].weight: -1 is below the minimum 0" in l for l in lines)
    assert any("governance.priority_classes: 'a' is defined twice" in l for l in lines)


def test_job_naming_an_unknown_priority_or_team():
    lines = problems({"sample_job": {"priority": "urgent", "team": "nobody"}})
    assert any("sample_job.priority: 'urgent' is not a priority class" in l for l in lines)
    assert any("sample_job.team: 'nobody' is not a team" in l for l in lines)


def test_topology_level_outside_the_allowed_set():
    lines = problems({"topology": {"mode": "preferred", "level": "topology.k8s.aws/network-node-layer-4"}})
    assert any(l.startswith("dev: topology.level: 'topology.k8s.aws/network-node-layer-4' is not a topology level") for l in lines)


def test_required_topology_on_a_type_without_topology_labels():
    lines = problems({"topology": {"mode": "required"}})  # dev's GPU group is g5
    assert any("topology.mode: 'required' but hyperpod.instance_groups[1] (ml.g5.8xlarge) has no EC2 topology labels" in l for l in lines)
    validation.load_settings(patched_context("dev", {"topology": {"mode": "preferred"}}), "dev")  # preferred is fine


def test_borrow_limit_only_with_lend_and_borrow():
    lines = problems({"governance": {"teams": [_team("ml-research", sharing="Lend", borrow_limit=50)]}})
    assert any("governance.teams[0].borrow_limit: 50 applies only with sharing 'LendAndBorrow'" in l for l in lines)


def test_teams_without_task_governance():
    lines = problems({"addons": {"task_governance": {"enabled": False}}})
    assert any(l.startswith("dev: addons.task_governance.enabled: False must be true") for l in lines)


def test_topology_is_judged_by_the_exact_type_as_ec2_lists_them():
    # EC2's instance topology prerequisites list types, not families (recorded as published in
    # tests/fixtures/published): p5.48xlarge has a topology, p5.4xlarge has none.
    from pathlib import Path

    from infra import catalogue

    page = (Path(__file__).parents[1] / "fixtures" / "published" / "ec2_instance_topology_instance_types.txt").read_text()
    listed = {t.strip() for line in page.splitlines() if "|" in line and not line.startswith("#") for t in line.split("|")}
    assert catalogue.TOPOLOGY_TYPES == listed
    for name in catalogue.CATALOGUE:
        assert catalogue.lookup(name).topology == (name.removeprefix("ml.") in listed), name
    assert not catalogue.lookup("ml.p5.4xlarge").topology and catalogue.lookup("ml.p5.48xlarge").topology
    groups = [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}, {"name": "gpu", "instance_type": "ml.p5.4xlarge", "count": 1}]
    lines = problems({"topology": {"mode": "required"}, "hyperpod": {"instance_groups": groups},
                      "governance": {"teams": [_team("ml-research", itype="ml.p5.4xlarge")]}})
    assert any("topology.mode: 'required' but hyperpod.instance_groups[1] (ml.p5.4xlarge) has no EC2 topology labels" in l for l in lines), lines


def test_a_fair_share_weight_given_with_fair_share_off_is_a_warning_as_the_api_reference_says():
    # botocore's sagemaker model documents the weight: "only used when FairShare is enabled".
    import botocore.session

    doc = botocore.session.get_session().get_service_model("sagemaker").shape_for("ComputeQuotaTarget").members["FairShareWeight"].documentation
    assert "only used when <code>FairShare</code> is enabled" in doc
    team = _team("ml-research", fair_share_weight=80)
    _, warnings = validation.load_settings(patched_context("dev", {"governance": {"fair_share": False, "teams": [team]}}), "dev")
    assert [w for w in warnings if "fair_share_weight" in w] == [
        "dev: governance.teams[0].fair_share_weight: 80 is used only when FairShare is enabled (SageMaker API reference, "
        "ComputeQuotaTarget); with governance.fair_share false, teams borrow idle compute first come, first served"]
    # Left at its default, or with fair share on, nothing is said.
    for patch in ({"fair_share": False, "teams": [_team("ml-research")]}, {"teams": [team]}):
        _, warnings = validation.load_settings(patched_context("dev", {"governance": patch}), "dev")
        assert not [w for w in warnings if "fair_share_weight" in w]
