"""The review of what a platform team changes most in a shared cluster's cdk.json, on a pair of
prod assemblies synthesized in the test: a team added with its people, a team removed with
theirs, a quota cut and a borrowing limit raised, a new cluster admin and one more GPU node.
Each callout is asserted exactly (no more, no fewer), with the cdk.json line SARIF shows it at
(the line the pull request changed, read from the file), and this update's plan, its folded
diffs and its summarized YAML with it."""

from __future__ import annotations

import pytest

from cli.review import report as review
from cli.review import changes, people, sarif
from infra import timing
from tests.cli.test_sarif import _field_text, _project

RESEARCHERS = "arn:aws:iam::111111111111:role/ml-research-scientists"
INFERENCE = "arn:aws:iam::111111111111:role/ml-inference-engineers"
PRODUCTION = "arn:aws:iam::111111111111:role/ml-production-engineers"
ONCALL = "arn:aws:iam::111111111111:role/platform-oncall"
# prod as cdk.json has it, changed as a platform team's pull request would: ml-production leaves, ml-inference
# comes with its people, ml-research's guarantee halves while it may borrow twice as much, an on-call role
# becomes cluster admin, and the GPU group grows by one node.
PULL_REQUEST = {
    "eks": {"admin_principal_arns": ["arn:aws:iam::111111111111:role/Admin", ONCALL]},
    "hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.8xlarge", "count": 2},
                                     {"name": "gpu", "instance_type": "ml.p5.48xlarge", "count": 5, "ebs_volume_gb": 1000}]},
    "governance": {"teams": [
        {"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}],
         "sharing": "LendAndBorrow", "borrow_limit": 100, "fair_share_weight": 50,
         "absolute_borrow_limits": [{"instance_type": "ml.p5.48xlarge", "accelerators": 8}], "principals": [RESEARCHERS]},
        {"name": "ml-inference", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}], "sharing": "Lend",
         "principals": [INFERENCE]},
    ]},
}

# What the app applies for a team with people (manifests/teams.py's RBAC, and its tenancy: a default-deny policy and
# Pod Security labels on its namespace).
TEAM_OBJECTS = "NetworkPolicy, ClusterRole, ClusterRoleBinding, Role, RoleBinding, Pod Security labels"
CALLOUTS = [
    "NODE COUNT: instance group gpu in hyperpod-prod-hyperpod goes from 4 to 5 node(s)",
    "TEAM ADDED: team ml-inference: compute quota (1 instance of ml.p5.48xlarge; sharing Lend (borrows nothing)); its namespace "
    "hyperpod-ns-ml-inference and queue hyperpod-ns-ml-inference-localqueue (task governance makes them of the quota); its "
    f"{TEAM_OBJECTS}; access entries for 1 principal(s)",
    "TEAM REMOVED: team ml-production: its compute quota (2 instances of ml.p5.48xlarge; sharing LendAndBorrow up to 50% of its "
    "quota); its namespace hyperpod-ns-ml-production and queue hyperpod-ns-ml-production-localqueue (task governance makes them of "
    f"the quota); its {TEAM_OBJECTS}; access entries for 1 principal(s) go; its jobs lose their guarantee",
    "TEAM QUOTA: team ml-research: guaranteed ml.p5.48xlarge: 2 instances -> 1 instance",
    f"ACCESS GAINED: {INFERENCE} -> namespace hyperpod-ns-ml-inference",
    f"ACCESS LOST: {PRODUCTION} -> namespace hyperpod-ns-ml-production",
    f"ACCESS GAINED: {ONCALL} -> cluster admin",
    # ml-research held 2 nodes and borrowed at most 8 GPUs (1 node) of what ml-production lent (2 nodes): 3 at most.
    # Now it holds 1 and still borrows at most 8 GPUs, of what ml-inference lends (1 node) and the 3 nodes no team's
    # quota holds (idle resource sharing, on in prod): 2 at most.
    "JOBS INADMISSIBLE: team ml-research's jobs of 3 nodes on group gpu (ml.p5.48xlarge) can never be admitted now: the most it "
    "can hold, borrowing all it may, goes from 3 to 2 (guaranteed 2 -> 1); such jobs wait in its queue forever",
    "JOB BORROWS: the sample job llama3-1-8b-fsdp was guaranteed and is admitted only by borrowing now: sample_job.nodes: 2 nodes "
    "of ml.p5.48xlarge (16 GPUs) are admitted for team ml-research only by borrowing: 8 guaranteed + 8 of at most 8 borrowed "
    "(absolute_borrow_limits); the job waits while the lenders use their quota, and is preempted when they reclaim it",
]


@pytest.fixture(scope="module")
def pull_request(synth) -> dict:
    baseline = changes.load_baseline([str(synth("prod").outdir)], [])
    return review.build(synth("prod", PULL_REQUEST).outdir, against=baseline, with_lint=False, with_cdk_diff=True)


def test_each_team_and_each_persons_access_is_called_out_at_the_line_the_pull_request_changed(pull_request, tmp_path):
    assert pull_request["changes"]["callouts"] == CALLOUTS and pull_request["pass"]
    project = _project(tmp_path, PULL_REQUEST, env="prod")
    CALLOUTS_QUOTAS = '"quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}]'
    log = sarif.log(pull_request, project=project, env="prod")
    results = {r["message"]["text"]: r for r in log["runs"][0]["results"]}
    # Each kind is a rule of its own, described in words (not the fallback for a kind the log does not know).
    assert all(sarif.CHANGE_KINDS[r["id"].removeprefix("change/").replace("-", " ").upper()][0] == r["shortDescription"]["text"]
               for r in log["runs"][0]["tool"]["driver"]["rules"] if r["id"].startswith("change/"))
    shown = {text: _field_text(project, results[text]) for text in CALLOUTS}
    assert shown == {
        CALLOUTS[0]: '"count": 5',
        CALLOUTS[1]: '{"name": "ml-inference", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}], "sharing": "Lend", '
                     f'"principals": ["{INFERENCE}"]}}',
        CALLOUTS[2]: '"teams": [',  # removed: the list it was in
        CALLOUTS[3]: CALLOUTS_QUOTAS,
        CALLOUTS[4]: f'"{INFERENCE}"',
        CALLOUTS[5]: '"teams": [',
        CALLOUTS[6]: f'"{ONCALL}"',
        CALLOUTS[7]: CALLOUTS_QUOTAS,  # the team's own change, which shrank what it can hold
        CALLOUTS[8]: CALLOUTS_QUOTAS,
    }
    assert {results[text]["level"] for text in CALLOUTS} == {"warning"}


def test_a_quota_left_out_is_read_with_sagemakers_defaults():
    # botocore's SageMaker model documents what a ComputeQuota means where a field is not given.
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    sharing = model.shape_for("ResourceSharingConfig").members
    assert f"Default is <code>{people.DEFAULT_BORROW_LIMIT}</code>" in sharing["BorrowLimit"].documentation
    assert "Default is <code>LendandBorrow</code>" in sharing["Strategy"].documentation and people.DEFAULT_STRATEGY in sharing["Strategy"].enum
    assert f"Weight {people.DEFAULT_FAIR_SHARE_WEIGHT} is the default" in model.shape_for("ComputeQuotaTarget").members["FairShareWeight"].documentation
    assert f"Default is <code>{people.DEFAULT_PREEMPT}</code>" in model.shape_for("ComputeQuotaConfig").members["PreemptTeamTasks"].documentation


def test_this_updates_plan_waits_for_the_new_nodes_deep_health_checks_and_the_gates_not_a_whole_deploy(pull_request, synth):
    # One more p5 node with both deep health checks ("a DHC takes around 60-90 minutes": HyperPod docs, in
    # infra/timing.py), read from the template; the gates re-run because their properties change.
    (group,) = [g for r in synth("prod", PULL_REQUEST).resources("hyperpod", "AWS::SageMaker::Cluster").values()
                for g in r["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "gpu"]
    assert group["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    nodes = timing.node_minutes(accelerated=True, efa_interfaces=32, count=1, checks=group["OnStartDeepHealthChecks"])
    plan = pull_request["changes"]["update_plan"]
    links = len(synth("prod").resources("hyperpod", "Custom::HyperPodNodesReady"))
    assert plan["waits"] == [
        f"nodes added: 1 x ml.p5.48xlarge in group gpu with deep health checks InstanceStress, InstanceConnectivity (~{nodes:.0f} min)",
        "the accelerator gate re-runs",
        f"the node gate re-runs ({links} link(s))",
    ]
    # prod provisions continuously: the cluster's update ends at once and the node gate's first link waits for the node.
    path = {(st["type"], st["minutes"]) for st in plan["critical_path"]}
    assert ("Custom::HyperPodNodesReady", nodes) in path and ("AWS::SageMaker::Cluster", 3.0) in path
    assert nodes < plan["minutes"] < pull_request["deploy_plan"]["minutes"]  # not the first deploy's
    (line,) = pull_request["changes"]["deltas"]["lines"]["plan"]
    assert line.startswith(f"Deploy: about {plan['minutes']} minutes for this update: nodes added: 1 x ml.p5.48xlarge")
    text = review.to_markdown(pull_request)
    assert "This update waits on (the plan at the end is a first deploy's):" in text and "## Estimated deploy plan (a first deploy)" in text


def test_the_node_gates_identical_link_diffs_fold_into_one_and_the_alert_rules_yaml_shows_what_changes(pull_request, synth):
    diff = pull_request["changes"]["cdk_diff"]
    # cdk diff names a resource by its construct path without the stack and a last "Default".
    links = sorted(r["Metadata"]["aws:cdk:path"].removeprefix("hyperpod-prod-hyperpod/").removesuffix("/Default")
                   for r in synth("prod").resources("hyperpod", "Custom::HyperPodNodesReady").values())
    gates = [line for line in diff["hyperpod-prod-hyperpod"].splitlines() if line.startswith("[~] Custom::HyperPodNodesReady")]
    (gate,) = gates
    first = gate.split()[2]
    assert first in links and gate.endswith(f"(x{len(links)}: the same change also in {', '.join(l for l in links if l != first)})")
    # The rule group's YAML (the RuleGroupsNamespace's Data, beside the workspace): only the two rules that name the teams' namespaces.
    (rules,) = [text for text in diff.values() if "AWS::APS::RuleGroupsNamespace" in text]
    assert "a value of" in rules and "the lines that change:" in rules
    changed = [line.strip() for line in rules.splitlines() if line.strip().startswith(("- ", "+ "))]
    # (the YAML's lines; the same stack's Kubernetes manifests, laid out as JSON, change their "expression"s too)
    assert [c[:2] + c[2:].split(":")[0] for c in changed if c[2:].strip().startswith("expr")] == [
        "-    expr", "+    expr", "-    expr", "+    expr"]
    assert "GpuXidError" not in rules and "hyperpod-ns-ml-inference" in rules


def test_the_jobs_a_quota_cut_keeps_out_are_the_ones_the_team_kit_says_it_can_no_longer_run():
    # One admission model (infra/admission.py) for validate, render-job, the team kit and the review: the kit's
    # largest job before and after is what the JOBS INADMISSIBLE callout names.
    from cli import team_kit
    from infra import validation
    from tests.conftest import CONTEXT, patched_context

    before = team_kit.build(validation.load_settings(CONTEXT, "prod")[0], "ml-research")["largest_job"]
    after = team_kit.build(validation.load_settings(patched_context("prod", PULL_REQUEST), "prod")[0], "ml-research")["largest_job"]
    assert before == ["ml.p5.48xlarge (group gpu): 2 nodes guaranteed, 3 with borrowing"]
    assert after == ["ml.p5.48xlarge (group gpu): 1 node guaranteed, 2 with borrowing"]


def test_a_change_that_makes_the_sample_job_inadmissible_is_refused_before_anything_is_synthesized(synth, tmp_path, capsys, monkeypatch):
    # With the admission model among the config's rules, such a change does not synthesize (cdk synth refuses it too):
    # its review is that refusal, in validation's line and exit 2, without synthesizing either side.
    from cli import main as cli

    never = {"governance": {"teams": [{**PULL_REQUEST["governance"]["teams"][0], "sharing": "Lend", "borrow_limit": None,
                                       "absolute_borrow_limits": []}, PULL_REQUEST["governance"]["teams"][1]]}}
    project = _project(tmp_path / "project", never, env="prod")
    monkeypatch.chdir(project)
    assert cli.main(["review", "--env", "prod", "--against", str(synth("prod").outdir), "--outdir", str(tmp_path / "out")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and errors[0].startswith("error: prod: sample_job.nodes: 2 nodes of ml.p5.48xlarge (16 GPUs) can "
                                                          "never be admitted for team ml-research"), errors
    assert not (tmp_path / "out").exists()
