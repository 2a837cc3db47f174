"""Task governance: Kueue, then the scheduler policy and one quota per team, in the addons stack."""

from __future__ import annotations

import json

import pytest

from infra import naming
from tests.conftest import ENVIRONMENTS


def _scheduler(s) -> dict:
    (r,) = s.resources("addons", "AWS::SageMaker::ClusterSchedulerConfig").values()
    return r


def _quotas(s) -> dict:
    return {r["Properties"]["ComputeQuotaTarget"]["TeamName"]: r for r in s.resources("addons", "AWS::SageMaker::ComputeQuota").values()}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_scheduler_config_carries_priority_classes_fair_share_and_idle_sharing(synth, env):
    s = synth(env)
    props = _scheduler(s)["Properties"]
    assert props["SchedulerConfig"]["PriorityClasses"] == [
        {"Name": pc.name, "Weight": pc.weight} for pc in s.settings.governance.priority_classes
    ]
    assert props["SchedulerConfig"]["FairShare"] == "Enabled"
    assert props["SchedulerConfig"]["IdleResourceSharing"] == "Enabled"
    assert "Cluster" in json.dumps(props["ClusterArn"]) and "hyperpod" in json.dumps(props["ClusterArn"])


def test_scheduler_config_waits_for_kueue_and_quotas_for_the_scheduler_config(synth):
    # FACTS: a ClusterSchedulerConfig created before task governance is active ends in
    # CreateFailed; the awsome Terraform waits for kueue-controller-manager before its quotas.
    s = synth("dev")
    (kueue_id,) = [k for k, r in s.resources("addons", "Custom::AWSCDK-EKS-KubernetesObjectValue").items()
                   if r["Properties"]["ObjectName"] == "kueue-controller-manager"]
    assert kueue_id in _scheduler(s)["DependsOn"]
    for quota in _quotas(s).values():
        assert any(d.startswith("SchedulerConfig") for d in quota["DependsOn"])


def test_prod_has_two_teams_that_lend_and_borrow(synth):
    quotas = _quotas(synth("prod"))
    assert set(quotas) == {"ml-research", "ml-production"}
    research = quotas["ml-research"]["Properties"]
    assert research["ComputeQuotaConfig"]["ComputeQuotaResources"] == [{"InstanceType": "ml.p5.48xlarge", "Count": 2}]
    assert research["ComputeQuotaConfig"]["ResourceSharingConfig"] == {
        "Strategy": "LendAndBorrow", "BorrowLimit": 100, "AbsoluteBorrowLimits": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": 8}]
    }
    assert research["ComputeQuotaConfig"]["PreemptTeamTasks"] == "LowerPriority"
    assert research["ComputeQuotaTarget"] == {"TeamName": "ml-research", "FairShareWeight": 50}
    assert research["ActivationState"] == "Enabled"
    assert research["Name"] == "hyperpod-prod-ml-research"


def test_quota_by_accelerators_and_inactive_team(synth):
    s = synth("dev", {"governance": {"fair_share": False, "teams": [
        {"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}], "sharing": "DontLend",
         "preempt": "Never", "active": False}]}})
    props = _quotas(s)["ml-research"]["Properties"]
    assert props["ComputeQuotaConfig"]["ComputeQuotaResources"] == [{"InstanceType": "ml.g5.8xlarge", "Accelerators": 1}]
    assert props["ComputeQuotaConfig"]["ResourceSharingConfig"] == {"Strategy": "DontLend"}
    assert props["ActivationState"] == "Disabled"
    assert _scheduler(s)["Properties"]["SchedulerConfig"]["FairShare"] == "Disabled"


def test_team_names_follow_what_task_governance_creates():
    names = naming.team_names("ml-research")
    assert names.namespace == "hyperpod-ns-ml-research"
    assert names.local_queue == "hyperpod-ns-ml-research-localqueue"
    assert names.cluster_queue == "hyperpod-ns-ml-research-clusterqueue"
    assert names.priority_class("training") == "training-priority"


def test_queue_outputs_name_namespace_and_local_queue(synth):
    outputs = synth("prod").templates["addons"]["Outputs"]
    assert {o["Value"] for k, o in outputs.items() if k.startswith("Queue")} == {
        "hyperpod-ns-ml-research/hyperpod-ns-ml-research-localqueue",
        "hyperpod-ns-ml-production/hyperpod-ns-ml-production-localqueue",
    }


def test_turning_task_governance_off_removes_kueue_the_scheduler_config_and_the_quotas(synth):
    s = synth("dev", {"addons": {"task_governance": {"enabled": False}}, "governance": {"teams": [], "priority_classes": []},
                      "sample_job": {"team": None, "priority": None}})
    assert not s.resources("addons", "AWS::SageMaker::ClusterSchedulerConfig")
    assert not s.resources("addons", "AWS::SageMaker::ComputeQuota")
    assert not [r for r in s.resources("addons", "AWS::EKS::Addon").values()
                if r["Properties"]["AddonName"] == "amazon-sagemaker-hyperpod-taskgovernance"]


def test_gang_admission_has_no_field_in_the_scheduler_config_and_the_docs_say_how_to_turn_it_on():
    # HyperPod's gang scheduling page: task governance implements it with Kueue's waitForPodsReady,
    # turned on in the console or with kubectl. Neither the CloudFormation type the project creates
    # (cfn-lint's schema) nor SageMaker's SchedulerConfig (botocore) has a field for it: when one
    # appears, this fails and the scheduler config should take it.
    import re
    from pathlib import Path

    import botocore.session

    from infra import cfn_schema

    gang = re.compile(r"gang|podsready|pods_ready|requeu|backoff", re.I)
    schema = json.dumps(cfn_schema.resource("AWS::SageMaker::ClusterSchedulerConfig"))
    assert not gang.search(schema)
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert set(model.shape_for("SchedulerConfig").members) == {"PriorityClasses", "FairShare", "IdleResourceSharing"}
    for op in ("CreateClusterSchedulerConfig", "UpdateClusterSchedulerConfig"):
        assert not gang.search(" ".join(model.operation_model(op).input_shape.members))
    page = (Path(__file__).resolve().parents[2] / "docs" / "governance.md").read_text()
    assert "## Gang admission" in page and "sagemaker-hyperpod-eks-operate-console-ui-governance-tasks-gang-scheduling" in page
