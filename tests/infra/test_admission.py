"""The admission model (infra/admission.py): a job's demand as Kueue counts it and whether its
team can ever hold it, held against Kueue's own arithmetic, the SageMaker API reference's rules
for ComputeQuota and the task-governance example AWS publishes. Config-level: no synth."""

from __future__ import annotations

import json
import re

import botocore.session
import pytest

from infra import admission, config, validation
from infra.admission import QueueQuota, cluster_queue_maximum
from tests.conftest import CAPABILITIES, CONTEXT, patched_context

GPU_GROUPS = lambda n: [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},  # noqa: E731
                        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": n}]


def _settings(patch: dict, env: str = "dev") -> config.Settings:
    return validation.load_settings(patched_context(env, patch), env)[0]


def _problems(patch: dict, env: str = "dev") -> list[str]:
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context(env, patch), env)
    return exc.value.problems


def _warnings(patch: dict, env: str = "dev") -> list[str]:
    return validation.load_settings(patched_context(env, patch), env)[1]


def _sharing_docs() -> dict:
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("ResourceSharingConfig")
    return {name: member.documentation for name, member in shape.members.items()} | {"strategies": shape.members["Strategy"].enum}


# ------------------------------------------------------------------ Kueue's arithmetic


def test_a_cluster_queue_borrows_the_unused_nominal_quota_of_its_cohort():
    # Kueue docs, concepts/cluster_queue.md, "Borrowing example": team-a-cq (9 CPUs) and
    # team-b-cq (12) in one cohort; with team-b idle, team-a admits up to 12+9=21.
    a, b = QueueQuota(9), QueueQuota(12)
    assert cluster_queue_maximum(a, [b]) == 21
    # "If the spec.cohort field is empty ... it cannot borrow quota from any other ClusterQueue."
    assert cluster_queue_maximum(a, [], in_cohort=False) == 9


def test_a_borrowing_limit_caps_what_a_queue_borrows_and_leaves_the_other_unlimited():
    # Kueue docs, cluster_queue.md, "BorrowingLimit": borrowingLimit 1 on team-a-cq admits
    # 9+1=10; "team-b-cq can use up to 12+9 CPUs".
    a, b = QueueQuota(9, borrowing_limit=1), QueueQuota(12)
    assert cluster_queue_maximum(a, [b]) == 10
    assert cluster_queue_maximum(b, [a]) == 21


def test_a_lending_limit_caps_what_a_queue_lends():
    # Kueue docs, cluster_queue.md, "LendingLimit": lendingLimit 1 on team-b-cq lets team-a-cq
    # admit 9+1=10, and team-b-cq still uses up to 9+12.
    a, b = QueueQuota(9), QueueQuota(12, lending_limit=1)
    assert cluster_queue_maximum(a, [b]) == 10
    assert cluster_queue_maximum(b, [a]) == 21


# ------------------------------------------------------------------ the API reference's rules


def test_only_lend_and_borrow_borrows_and_dont_lend_lends_nothing():
    # SageMaker API reference, ResourceSharingConfig.Strategy (botocore's sagemaker model):
    # DontLend "do not lend", Lend "can lend", LendandBorrow "lend ... and borrow".
    docs = _sharing_docs()
    said = dict(re.findall(r"<code>(\w+)</code>: entities ([^.<]+)", docs["Strategy"]))
    assert {k.lower() for k in said} == {k.lower() for k in docs["strategies"]}
    s = _settings({"hyperpod": {"instance_groups": GPU_GROUPS(4)}, "governance": {"teams": [
        {"name": strategy.lower(), "sharing": strategy, "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 1}]}
        for strategy in docs["strategies"]]}, "sample_job": {"team": None}})
    for strategy in docs["strategies"]:
        team = next(t for t in s.governance.teams if t.sharing == strategy)
        queue = admission.cluster_queue(s, team, "ml.g5.8xlarge")["accelerators"]
        words = next(v for k, v in said.items() if k.lower() == strategy.lower())
        assert (queue.borrowing_limit > 0) == ("borrow idle compute" in words), strategy
        assert (queue.lending_limit == 0) == ("do not lend" in words), strategy


def test_borrow_limit_is_a_share_of_the_teams_quota_and_defaults_to_the_apis_fifty():
    default = re.search(r"Default is <code>(\d+)</code>", _sharing_docs()["BorrowLimit"]).group(1)
    assert admission.DEFAULT_BORROW_LIMIT == int(default)
    s = _settings({"hyperpod": {"instance_groups": GPU_GROUPS(4)}, "governance": {"teams": [
        {"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 2}]},
        {"name": "ml-production", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 2}], "borrow_limit": 150}]}})
    research, production = s.governance.teams
    assert admission.cluster_queue(s, research, "ml.g5.8xlarge")["accelerators"].borrowing_limit == 1  # 50% of 2
    assert admission.cluster_queue(s, production, "ml.g5.8xlarge")["accelerators"].borrowing_limit == 3  # 150% of 2


def test_absolute_borrow_limits_replace_the_percentage_for_their_type_either_way():
    # ResourceSharingConfig.AbsoluteBorrowLimits: "regardless of the percentage-based BorrowLimit".
    assert "regardless of the percentage-based" in _sharing_docs()["AbsoluteBorrowLimits"]
    for percent in (10, 100, 500):  # 0.8, 8 and 40 GPUs by the percentage alone
        s = _settings({"governance": {"teams": [
            {"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}], "borrow_limit": percent,
             "absolute_borrow_limits": [{"instance_type": "ml.p5.48xlarge", "accelerators": 4}]},
            {"name": "ml-production", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 3}]}]}, "sample_job": {"nodes": 1}}, env="prod")
        (share,) = [v for k, v in admission.team_shares(s, s.governance.teams[0], "ml.p5.48xlarge").items() if k == "accelerators"]
        assert (share.guaranteed, share.borrowable, share.limit) == (8, 4, "absolute_borrow_limits")


# ------------------------------------------------------------------ idle resource sharing


def test_idle_resource_sharing_is_what_the_api_reference_says_it_is():
    # SageMaker API reference, SchedulerConfig.IdleResourceSharing (botocore's model): "When
    # enabled, unallocated resources are automatically calculated and made available for
    # entities to borrow." And the project's default is on.
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("SchedulerConfig")
    text = re.sub(r"\s+", " ", re.sub("<[^>]+>", "", shape.members["IdleResourceSharing"].documentation))
    assert "When enabled, unallocated resources are automatically calculated and made available for entities to borrow" in text
    assert validation.load_settings(CONTEXT, "prod")[0].governance.idle_resource_sharing


def test_a_cohorts_own_quota_is_borrowed_within_the_borrowing_limit():
    # Kueue's potentialAvailable: a cohort's own quota adds to what its queues may borrow, and the
    # queue's borrowingLimit still caps it.
    a, b = QueueQuota(2, borrowing_limit=10), QueueQuota(2, lending_limit=0)
    assert cluster_queue_maximum(a, [b], cohort_own=4) == 6
    assert cluster_queue_maximum(QueueQuota(2, borrowing_limit=1), [b], cohort_own=4) == 3


# 4 ml.g5.8xlarge of which team-a's quota holds 2 and team-b's 1 (which it keeps: DontLend);
# the fourth is in no team's quota.
IDLE = lambda sharing=True, borrow_limit=100: {  # noqa: E731
    "hyperpod": {"instance_groups": GPU_GROUPS(4)},
    "governance": {"idle_resource_sharing": sharing, "teams": [
        {"name": "team-a", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 2}], "borrow_limit": borrow_limit},
        {"name": "team-b", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 1}], "sharing": "DontLend"}]},
    "sample_job": {"team": "team-a", "nodes": 3}}


def test_a_job_that_fits_only_by_idle_capacity_is_admitted_with_a_warning_that_it_borrows():
    s = _settings(IDLE())
    share = admission.team_shares(s, s.governance.teams[0], "ml.g5.8xlarge")["accelerators"]
    assert (share.guaranteed, share.borrowable, share.idle) == (2, 1, 1)
    assert admission.sample_job(s).verdict == "borrowing"
    (line,) = [w for w in _warnings(IDLE()) if w.startswith("dev: sample_job.nodes")]
    assert ("3 nodes of ml.g5.8xlarge (3 GPUs) are admitted for team team-a only by borrowing: 2 guaranteed + 1 of at most 1 "
            "borrowed (the 1 no team's quota holds), 1 of them from capacity no team's quota holds (governance.idle_resource_sharing)") in line


def test_with_idle_resource_sharing_off_the_same_job_is_refused():
    (line,) = [l for l in _problems(IDLE(sharing=False)) if "sample_job" in l]
    assert line == ("dev: sample_job.nodes: 3 nodes of ml.g5.8xlarge (3 GPUs) can never be admitted for team team-a: "
                    "2 guaranteed + at most 0 borrowed (no other team lends any) = 2 GPUs; at most 2 nodes")


def test_the_borrow_limit_caps_what_idle_capacity_gives():
    # 4 nodes: team-b's one stays its own, and 50% of team-a's 2 lets it borrow 1 of the idle 1.
    patch = IDLE(borrow_limit=50)
    patch["hyperpod"]["instance_groups"] = GPU_GROUPS(6)  # 3 idle now
    s = _settings(patch)
    share = admission.team_shares(s, s.governance.teams[0], "ml.g5.8xlarge")["accelerators"]
    assert (share.guaranteed, share.borrowable) == (2, 1)
    patch["sample_job"]["nodes"] = 4
    (line,) = [l for l in _problems(patch) if "sample_job" in l]
    assert "2 guaranteed + at most 1 borrowed (borrow_limit 50% of its quota) = 3 GPUs; at most 3 nodes" in line


# ------------------------------------------------------------------ HyperPod's own example


# aws-samples/awsome-distributed-training 1.architectures/7.sagemaker-hyperpod-eks/task-governance/
# README.md: 4 ml.g5.8xlarge, Team A and Team B with Count=2, LendAndBorrow, BorrowLimit=50;
# "Team A submits a PyTorch job that requires 3 instances but only has 2 allocated. The system
# allows Team A to borrow 1 instance from Team B's idle capacity."
AWSOME = {"hyperpod": {"instance_groups": GPU_GROUPS(4)}, "governance": {"teams": [
    {"name": name, "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 2}], "sharing": "LendAndBorrow", "borrow_limit": 50}
    for name in ("team-a", "team-b")]}}


def test_the_task_governance_examples_three_instance_job_runs_by_borrowing_one():
    s = _settings({**AWSOME, "sample_job": {"team": "team-a", "nodes": 3}})
    verdict = admission.sample_job(s)
    assert verdict.verdict == "borrowing"
    assert (verdict.nodes_guaranteed, verdict.nodes_at_most) == (2, 3)
    assert verdict.demand["accelerators"] == 3 and verdict.shares["accelerators"].borrowable == 1


def test_the_examples_team_can_never_run_four_instances_and_validate_says_so_with_the_arithmetic():
    (line,) = [l for l in _problems({**AWSOME, "sample_job": {"team": "team-a", "nodes": 4}}) if "sample_job" in l]
    assert line == ("dev: sample_job.nodes: 4 nodes of ml.g5.8xlarge (4 GPUs) can never be admitted for team team-a: "
                    "2 guaranteed + at most 1 borrowed (borrow_limit 50% of its quota) = 3 GPUs; at most 3 nodes")


# ------------------------------------------------------------------ what Kueue counts


@pytest.mark.parametrize("env", ["dev", "prod", "mig"])
def test_the_demand_is_what_the_rendered_pod_requests(env):
    from manifests import job

    s = _settings(CAPABILITIES[env]) if env in CAPABILITIES else validation.load_settings(CONTEXT, env)[0]
    obj = job.build(s, image="example.com/train:1")
    (container,) = obj["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"]
    requests = {k: (int(v.removesuffix("Gi")) if isinstance(v, str) else v) for k, v in container["resources"]["requests"].items()}
    assert container["resources"]["limits"] == container["resources"]["requests"]
    verdict = admission.sample_job(s)
    assert verdict.per_node == admission.kueue_kinds(requests, s.instance_group(s.sample_job.instance_group).spec)
    assert verdict.demand == {k: n * obj["spec"]["replicaSpecs"][0]["replicas"] for k, n in verdict.per_node.items()}


def test_the_shipped_environments_run_their_jobs_on_guaranteed_quota():
    for env in ("dev", "prod"):
        verdict = admission.sample_job(validation.load_settings(CONTEXT, env)[0])
        assert verdict.verdict == "guaranteed", verdict.line


# ------------------------------------------------------------------ the cases


def test_prod_with_four_nodes_in_ml_research_is_refused_by_validate():
    lines = _problems({"sample_job": {"nodes": 4}}, env="prod")
    assert ("prod: sample_job.nodes: 4 nodes of ml.p5.48xlarge (32 GPUs) can never be admitted for team ml-research: "
            "16 guaranteed + at most 8 borrowed (absolute_borrow_limits) = 24 GPUs; at most 3 nodes") in lines


def test_three_nodes_in_ml_research_validate_with_a_warning_that_one_is_borrowed():
    (line,) = [w for w in _warnings({"sample_job": {"nodes": 3}}, env="prod") if w.startswith("prod: sample_job.nodes")]
    assert "3 nodes of ml.p5.48xlarge (24 GPUs) are admitted for team ml-research only by borrowing: 16 guaranteed + 8 of at most 8" in line


@pytest.mark.parametrize("sharing", ["Lend", "DontLend"])
def test_a_team_that_never_borrows_cannot_run_more_than_its_quota(sharing):
    teams = [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 2}], "sharing": sharing},
             {"name": "ml-production", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 2}]}]
    lines = _problems({"governance": {"teams": teams}, "sample_job": {"nodes": 3}}, env="prod")
    assert (f"prod: sample_job.nodes: 3 nodes of ml.p5.48xlarge (24 GPUs) can never be admitted for team ml-research: "
            f"16 guaranteed + at most 0 borrowed (sharing {sharing!r} never borrows) = 16 GPUs; at most 2 nodes") in lines


def test_a_vcpu_only_quota_holds_none_of_the_gpus_the_job_needs():
    teams = [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "vcpu": 192}], "borrow_limit": 100},
             {"name": "ml-production", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 3}]}]
    (line,) = [l for l in _problems({"governance": {"teams": teams}, "sample_job": {"nodes": 1}}, env="prod") if "sample_job" in l]
    assert line.startswith("prod: sample_job.team: 'ml-research' can never hold 1 node of ml.p5.48xlarge (8 GPUs): "
                           "0 guaranteed + at most 0 borrowed (borrow_limit 100% of its quota) = 0 GPUs; "
                           "its quota for ml.p5.48xlarge gives vCPUs only, which bring no GPUs")


def test_a_slice_the_team_holds_none_of_is_refused_and_one_it_holds_is_guaranteed():
    patch = json.loads(json.dumps(CAPABILITIES["mig"]))
    assert admission.sample_job(_settings(patch)).verdict == "guaranteed"
    patch["sample_job"]["team"] = "inference"  # it holds 4g.40gb slices, not 1g.10gb
    (line,) = [l for l in _problems(patch) if "sample_job" in l]
    assert line.startswith("dev: sample_job.team: 'inference' can never hold one 1g.10gb slice of ml.p5.48xlarge (1 mig-1g.10gb slice): "
                           "0 guaranteed + at most 0 borrowed")


def test_a_job_on_a_mig_group_without_a_slice_cannot_start():
    patch = json.loads(json.dumps(CAPABILITIES["mig"]))
    patch["sample_job"]["gpu_partition"] = None
    (line,) = [l for l in _problems(patch) if "sample_job" in l]
    assert line.startswith("dev: sample_job.gpu_partition: None must name a slice on instance group 'gpu'")
    assert "every slice of each node (24 x 1g.10gb, 8 x 4g.40gb) with 8 ranks per node" in line


def test_borrowing_is_bounded_by_what_the_other_teams_lend():
    # Kueue borrows only the cohort's unused nominal quota: a team that keeps its share lends none.
    teams = [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 2}], "borrow_limit": 500},
             {"name": "ml-production", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}], "sharing": "DontLend"},
             {"name": "ml-batch", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}], "sharing": "Lend"}]
    s = _settings({"governance": {"teams": teams}, "sample_job": {"nodes": 3}}, env="prod")
    share = admission.team_shares(s, s.governance.teams[0], "ml.p5.48xlarge")["accelerators"]
    assert (share.guaranteed, share.borrowable, share.limit) == (16, 8, "all ml-batch lends")
    lines = _problems({"governance": {"teams": teams}, "sample_job": {"nodes": 4}}, env="prod")
    assert any("16 guaranteed + at most 8 borrowed (all ml-batch lends) = 24 GPUs; at most 3 nodes" in l for l in lines), lines


def test_a_disabled_quota_lends_nothing_and_its_job_waits_with_a_warning():
    teams = [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 2}], "active": False},
             {"name": "ml-production", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 2}], "borrow_limit": 100}]
    assert "prod: sample_job.team: 'ml-research' has its compute quota disabled (active false): the job waits until it is enabled" in _warnings(
        {"governance": {"teams": teams}}, env="prod")
    s = _settings({"governance": {"teams": teams}, "sample_job": {"team": "ml-production"}}, env="prod")
    assert admission.team_shares(s, s.governance.teams[1], "ml.p5.48xlarge")["accelerators"].borrowable == 0


def test_a_job_without_a_team_is_bounded_by_its_group_alone_and_warned_beside_quotas():
    s = _settings({"sample_job": {"team": None, "nodes": 4}}, env="prod")
    verdict = admission.sample_job(s)
    assert verdict.verdict == "unmanaged" and verdict.shares == {}
    (line,) = [w for w in _warnings({"sample_job": {"team": None}}, env="prod") if "sample_job.team" in w]
    assert "joins no queue, so Kueue does not manage the job" in line and "ml-research, ml-production hold of ml.p5.48xlarge" in line


def test_an_elastic_job_that_can_never_reach_max_nodes_is_warned():
    warnings = _warnings({"sample_job": {"nodes": 2, "max_nodes": 4}}, env="prod")
    assert any("sample_job.max_nodes: 4 is more than team ml-research can ever hold (3 nodes of ml.p5.48xlarge)" in w for w in warnings)


def test_render_jobs_overrides_meet_the_same_model(capsys):
    # The README's own example, as it was: 2 nodes + 50% = 3 for ml-production, so 4 is refused, named by the flag that gave it.
    from cli import main as cli

    assert cli.main(["render-job", "-c", "env=prod", "--nodes", "4", "--team", "ml-production", "--image", "img:1"]) == 2
    err = capsys.readouterr().err
    assert "error: prod: --nodes: 4 nodes of ml.p5.48xlarge (32 GPUs) can never be admitted for team ml-production" in err


# ------------------------------------------------------------------ the largest job


def test_the_largest_job_per_team_and_group():
    s = validation.load_settings(CONTEXT, "prod")[0]
    research, production = s.governance.teams
    assert admission.largest_jobs(s, research) == [admission.Largest("gpu", "ml.p5.48xlarge", "node", 2, 3)]
    assert admission.largest_jobs(s, production) == [admission.Largest("gpu", "ml.p5.48xlarge", "node", 2, 3)]
    mig = _settings(CAPABILITIES["mig"])
    research = mig.governance.teams[0]
    # One-slice pods of 5 vCPUs: the 16 slices' proportional 54.9 vCPUs hold 10 of them; with
    # borrowing, vCPUs would allow 16, and no team lends 1g.10gb slices (inference holds 4g.40gb
    # ones), so 16. Its absolute limit on the system type makes that group count, for nothing.
    assert admission.largest_jobs(mig, research) == [
        admission.Largest("system", "ml.m5.4xlarge", "node", 0, 0),
        admission.Largest("gpu", "ml.p5.48xlarge", "1g.10gb slice", 10, 16),
        admission.Largest("gpu", "ml.p5.48xlarge", "4g.40gb slice", 0, 0),
    ]
