"""The review of a change, on pairs of assemblies synthesized in the test: what a reviewer
must see for a count change, a type change, a rename, a switched-off stack, Karpenter, a team,
the job on more nodes and a public CIDR widened or narrowed, each as deltas beside the totals;
then cost and its rates, exposure, IAM access levels, the stack graph and the deploy estimate."""

from __future__ import annotations

import json
import re

import pytest

from cli.review import report as review
from cli.review import changes, cost, deploy_plan, iam_audit, prices
from cli.review.assembly import StackSummary, load_stacks
from infra import timing
from tests.conftest import GATED

GROUPS = [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}]


def _review(synth, base_patch, new_patch, *, cdk_diff=False, env="dev") -> dict:
    """The review of `new_patch` against `base_patch` (a patch of env, or a capability's name)."""
    base, new = (synth(p) if isinstance(p, str) else synth(env, p) for p in (base_patch, new_patch))
    baseline = changes.load_baseline([str(base.outdir)], [])
    return review.build(new.outdir, against=baseline, with_lint=False, with_cdk_diff=cdk_diff)


def _callouts(report, kind: str) -> list[str]:
    return [c for c in report["changes"]["callouts"] if c.startswith(kind + ":")]


def _research(instance_type: str) -> dict:
    return {"name": "ml-research", "quotas": [{"instance_type": instance_type, "accelerators": 1}]}


# The variants the delta tests share (each a synthesis): two more GPU nodes and a second team; the
# same with the job on two nodes (its second borrowed from ml-ops: infra/admission.py); the GPU
# group on another type.
GROWN = {
    "hyperpod": {"instance_groups": GROUPS + [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 3}]},
    "governance": {"teams": [{**_research("ml.g5.8xlarge"), "borrow_limit": 100},
                             {"name": "ml-ops", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]}]},
}
GROWN_JOB_ON_TWO = {**GROWN, "sample_job": {"nodes": 2}}
RETYPED = {
    "hyperpod": {"instance_groups": GROUPS + [{"name": "gpu", "instance_type": "ml.g6.8xlarge", "count": 1}]},
    "governance": {"teams": [_research("ml.g6.8xlarge")]},
}


def _lines(report, section: str) -> list[str]:
    return report["changes"]["deltas"]["lines"][section]


ML_OPS_ADDED = (
    "TEAM ADDED: team ml-ops: compute quota (1 GPU of ml.g5.8xlarge; sharing LendAndBorrow up to 50% of its quota); "
    "its namespace hyperpod-ns-ml-ops and queue hyperpod-ns-ml-ops-localqueue (task governance makes them of the quota); "
    "its NetworkPolicy, Pod Security labels"
)


def test_more_gpu_nodes_show_as_cost_quota_and_node_count_deltas_and_the_new_team_is_called_out(synth):
    report = _review(synth, None, GROWN)
    # 50%: SageMaker's BorrowLimit where the quota leaves it out (the team sets no borrow_limit).
    assert report["changes"]["callouts"] == [
        "NODE COUNT: instance group gpu in hyperpod-dev-hyperpod goes from 1 to 3 node(s)", ML_OPS_ADDED,
        "TEAM QUOTA: team ml-research: sharing LendAndBorrow up to 50% of its quota -> LendAndBorrow up to 100% of its quota",
    ]
    assert not [c for c in report["changes"]["changes"] if c["action"] in ("replaced", "removed")] and report["pass"]
    rate = prices.SAGEMAKER_RATE["ml.g5.8xlarge"]
    # Two more nodes at SageMaker's rate, and their samples into Managed Prometheus.
    samples = 2 * cost.SERIES_PER_NODE * 3600 / cost.SCRAPE_SECONDS  # an hour's
    hourly = 2 * rate + samples / 10_000_000 * prices.PROMETHEUS_PER_10M_SAMPLES
    monthly = hourly * prices.HOURS_PER_MONTH
    (line,) = _lines(report, "cost")
    assert line.startswith(f"Cost: +${hourly:,.2f} an hour, +${monthly:,.0f} a month (")
    assert _lines(report, "quotas")[0] == "Quota: ml.g5.8xlarge for cluster usage: 1 -> 3 node(s) at deploy"
    assert _lines(report, "job") == [] and _lines(report, "exposure") == [] and _lines(report, "stateful") == []
    text = review.to_markdown(report)
    assert f"a month** (+${hourly:,.2f} an hour, +${monthly:,.0f} a month against the baseline)" in text
    assert f"- {line}" in text.split("## Warnings")[0]  # in the change's own section, beside the callouts
    (gpu,) = [l for l in report["cost"]["lines"] if "(gpu)" in l["item"]]
    assert gpu["hourly"] == pytest.approx(3 * rate, abs=1e-3)
    assert {"quota": "ml.g5.8xlarge for cluster usage", "needed": 3, "line": "3 x ml.g5.8xlarge for cluster usage"} in report["risk"]["quotas"]


def test_a_team_added_shows_the_nodes_no_team_quota_covers(synth):
    # Two more A10G nodes and a second team of one A10G: one of three nodes is in no team's quota (before: none of one).
    report = _review(synth, None, GROWN)
    assert _lines(report, "quotas")[1:] == ["Team quotas: 1 of 3 ml.g5.8xlarge node(s) in no team's quota (was 0 of 1)"]
    assert [c for c in report["changes"]["changes"] if c["type"] == "AWS::SageMaker::ComputeQuota" and c["action"] == "added"]
    assert _callouts(report, "TEAM ADDED") == [ML_OPS_ADDED]


def test_the_job_on_more_nodes_restarts_and_says_its_new_shape(synth):
    report = _review(synth, GROWN, GROWN_JOB_ON_TWO)
    assert _lines(report, "job") == ["Job llama3-1-8b-fsdp: GPUs 1 -> 2, nodes 1 -> 2, processes per node 1, memory per node 108Gi"]
    restart, borrows = report["changes"]["callouts"]
    assert restart.startswith("JOB RESTARTS: the running job llama3-1-8b-fsdp restarts: its object changes (")
    assert "replicas.replicas" in restart and "GPUs 1 -> 2, nodes 1 -> 2" in restart
    # Its team holds 1 GPU and borrows the second (borrow_limit 100): the admission model's verdict, as validate warns it.
    assert borrows == ("JOB BORROWS: the sample job llama3-1-8b-fsdp was guaranteed and is admitted only by borrowing now: "
                       "sample_job.nodes: 2 nodes of ml.g5.8xlarge (2 GPUs) are admitted for team ml-research only by borrowing: "
                       "1 guaranteed + 1 of at most 1 borrowed (borrow_limit 100% of its quota); the job waits while the lenders "
                       "use their quota, and is preempted when they reclaim it")
    assert any(borrows.split("now: ")[1] in w for w in report["warnings"])
    assert _lines(report, "cost") == [f"Cost: unchanged (${report['cost']['hourly']:,.2f} an hour)"]
    assert _lines(report, "quotas") == _lines(report, "iam") == _lines(report, "exposure") == []


def test_a_type_change_replaces_every_node_of_the_group_restarts_the_job_and_needs_a_new_quota(synth):
    report = _review(synth, None, RETYPED, cdk_diff=True)
    replaced, quota, team, restart = report["changes"]["callouts"]
    assert team == "TEAM QUOTA: team ml-research: guaranteed ml.g5.8xlarge: 1 GPU -> none; guaranteed ml.g6.8xlarge: none -> 1 GPU"
    assert replaced.startswith("NODES REPLACED: HyperPod replaces every node of instance group gpu in hyperpod-dev-hyperpod")
    assert "InstanceType ml.g5.8xlarge -> ml.g6.8xlarge" in replaced
    assert quota.startswith("NEW QUOTA: 1 x ml.g6.8xlarge for cluster usage (new: check your quota")
    assert restart.startswith("JOB RESTARTS: the running job llama3-1-8b-fsdp restarts: its object changes (pod.affinity) and "
                              "instance group gpu's nodes are replaced")
    assert "Quota: ml.g5.8xlarge for cluster usage no longer needed (was 1)" in _lines(report, "quotas")
    assert "- 1 x ml.g6.8xlarge for cluster usage (new: check your quota)" in review.to_markdown(report)
    # A plain diff calls it a modification; the callout is what says the nodes go.
    (hp,) = [c for c in report["changes"]["changes"] if c["type"] == "AWS::SageMaker::Cluster"]
    assert hp["action"] == "modified"
    diff = report["changes"]["cdk_diff"]["hyperpod-dev-hyperpod"]
    assert '[-] "InstanceType": "ml.g5.8xlarge"' in diff and '[+] "InstanceType": "ml.g6.8xlarge"' in diff


def test_karpenter_on_shows_the_autoscaler_role_and_its_access_levels_without_a_callout_on_any_resource(synth):
    # Its kms:CreateGrant (Permissions management) is on the volume key, not `*`: information, not a callout.
    report = _review(synth, None, "karpenter")
    levels = report["changes"]["deltas"]["iam_levels"]
    assert levels["Permissions management"] == 1 and levels["Write"] == 2
    iam = _lines(report, "iam")
    assert iam[0].startswith("IAM access levels (distinct actions): Write ") and "Permissions management 2 -> 3" in iam[0]
    (autoscaler,) = [l for l in iam if "AutoscalerRole" in l]
    assert autoscaler.startswith("IAM new role `hyperpod-dev-hyperpod/AutoscalerRole/Resource`:")
    assert "kms:CreateGrant (Permissions management)" in autoscaler and "sagemaker:BatchAddClusterNodes (Write)" in autoscaler
    assert "Permissions management 3 (+1)" in review.to_markdown(report)
    # The node gate's accelerator check goes with the GPU nodes at deploy, and its Lambdas' log groups with it.
    assert "Stateful removed: 5 log group(s) of CDK-built Lambdas in hyperpod-dev-hyperpod" in _lines(report, "stateful")
    # Without GPU nodes at deploy the accelerator gate, the one importer of the cluster's endpoint and CA, goes;
    # the cluster stack keeps exporting both, so CloudFormation has no export in use to refuse.
    assert [c.split(":")[0] for c in report["changes"]["callouts"]] == ["NODE COUNT", "PROVISIONING MODE", "JOB RESTARTS"]


def test_a_rename_replaces_the_cluster_what_references_it_and_is_refused_while_imported(synth):
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    report = _review(synth, None, {"hyperpod": {"cluster_name": "renamed-hp"}})
    (hp,) = [c for c in report["changes"]["changes"] if c["type"] == "AWS::SageMaker::Cluster"]
    assert hp["action"] == "replaced" and hp["because"] == ["/properties/ClusterName"] and hp["critical"]
    # The scheduler config and the quotas go with it: ClusterArn is create-only in their schemas.
    for type_ in ("AWS::SageMaker::ClusterSchedulerConfig", "AWS::SageMaker::ComputeQuota"):
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", type_).schema
        assert "/properties/ClusterArn" in schema["createOnlyProperties"]
        assert any(type_ in c and "hyperpod-dev-hyperpod/Cluster" in c for c in _callouts(report, "REPLACED WITH IT"))
    (refused,) = _callouts(report, "REFUSED")
    assert "ClusterArn" in refused and "hyperpod-dev-addons imports it" in refused
    assert report["pass"] is False
    text = review.to_markdown(report)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("## What this change does")) + 2
    assert lines[first].startswith("- **REPLACED**: AWS::SageMaker::Cluster `Cluster`")


def test_switching_off_an_optional_stack_leaves_it_behind_and_loses_no_export_in_use(synth):
    report = _review(synth, None, {"sample_job": {"enabled": False}})
    assert report["changes"]["stacks_removed"] == ["hyperpod-dev-sample-job"]
    (left,) = _callouts(report, "STACK LEFT BEHIND")
    assert "cdk destroy hyperpod-dev-sample-job" in left
    assert not _callouts(report, "REFUSED")  # the stacks that stay keep exporting what it imports


NAMED_CIDR = {"eks": {"public_access_cidrs": ["203.0.113.0/24"]}}
ENDPOINT = "hyperpod-dev-cluster/Cluster/Resource"


def test_a_widened_public_cidr_is_called_out(synth):
    # dev's endpoint admits 0.0.0.0/0 (EKS's default); from one named network to that is the widening.
    report = _review(synth, NAMED_CIDR, None)
    assert report["changes"]["callouts"] == [
        f"EXPOSURE: the public Kubernetes API endpoint `{ENDPOINT}` now admits 0.0.0.0/0 (was 203.0.113.0/24)"
    ]
    assert _lines(report, "exposure") == [] and "- **EXPOSURE**: the public Kubernetes API endpoint" in review.to_markdown(report)


def test_a_narrowed_public_cidr_is_information_and_updates_the_cluster_in_place(synth):
    report = _review(synth, None, NAMED_CIDR, cdk_diff=True)
    assert report["changes"]["callouts"] == []
    assert _lines(report, "exposure") == [
        f"Exposure narrowed: the public Kubernetes API endpoint `{ENDPOINT}` admits 203.0.113.0/24 (was 0.0.0.0/0): kubectl of "
        "arn:aws:iam::111111111111:role/Admin from outside 203.0.113.0/24 loses the API"  # dev's one access entry: its admin
    ]
    assert [e["cidrs"] for e in report["risk"]["public_endpoints"]] == [["203.0.113.0/24"]]
    (eks,) = [c for c in report["changes"]["changes"] if c["type"] == "AWS::EKS::Cluster"]
    assert eks["action"] == "modified"  # PublicAccessCidrs is not create-only
    assert "203.0.113.0/24" in report["changes"]["cdk_diff"]["hyperpod-dev-cluster"]
    from cli.review import sarif

    results = sarif.log(report)["runs"][0]["results"]
    (endpoint,) = [r for r in results if r["ruleId"] == "exposure/public-endpoint"]
    assert endpoint["level"] == "note" and "203.0.113.0/24" in endpoint["message"]["text"]


def test_a_deployed_template_from_get_template_is_a_baseline(synth, tmp_path):
    s = synth("dev")
    template = json.loads((s.outdir / "hyperpod-dev-network.template.json").read_text())
    template["Resources"]["Vpc8378EB38"]["Properties"]["CidrBlock"] = "10.9.0.0/16"
    # What `aws cloudformation get-template` prints: the body as a string.
    (tmp_path / "deployed.json").write_text(json.dumps({"TemplateBody": json.dumps(template), "StagesAvailable": ["Original"]}))
    names = [x.name for x in load_stacks(s.outdir)]
    baseline = changes.load_baseline([f"hyperpod-dev-network={tmp_path / 'deployed.json'}"], names)
    report = review.build(s.outdir, against=baseline, with_lint=False, with_cdk_diff=False)
    assert report["changes"]["stacks_compared"] == ["hyperpod-dev-network"]
    assert {"stack": "hyperpod-dev-network", "resource": "Vpc8378EB38", "type": "AWS::EC2::VPC", "action": "replaced",
            "because": ["/properties/CidrBlock"], "critical": False} in report["changes"]["changes"]
    with pytest.raises(changes.BaselineError, match="no stack named 'deployed'"):
        changes.load_baseline([str(tmp_path / "deployed.json")], names)


def test_iam_actions_are_classified_by_their_documented_access_level():
    # Service Authorization Reference: kms:Decrypt and sts:AssumeRole are Write, though their
    # names read like reads; sagemaker:DescribeCluster is Read, iam:PassRole Permissions management.
    template = {"Resources": {"R": {"Type": "AWS::IAM::Role", "Properties": {"Policies": [{"PolicyDocument": {"Statement": [
        {"Effect": "Allow", "Action": ["kms:Decrypt", "sagemaker:DescribeCluster", "iam:PassRole", "s3:GetObjekt"], "Resource": "*"}]}}]}}}}
    roles = iam_audit.audit({"s": template})
    assert iam_audit.access_level("kms:Decrypt") == "Write" and iam_audit.access_level("sts:AssumeRole") == "Write"
    # A pattern takes the highest level of what it matches: every ec2:Describe* is List, s3:* reaches PutBucketPolicy.
    assert iam_audit.access_level("ec2:Describe*") == "List" and iam_audit.access_level("s3:*") == "Permissions management"
    assert iam_audit.on_any_resource(roles) == [
        {"role": "R", "level": "Permissions management", "stack": "s", "id": "R", "actions": ["iam:PassRole"]},
        {"role": "R", "level": "Write", "stack": "s", "id": "R", "actions": ["kms:Decrypt"]},
    ]
    assert iam_audit.unknown_actions(roles) == [{"role": "R", "action": "s3:GetObjekt"}]


@pytest.mark.parametrize("env", GATED)
def test_no_deployed_role_uses_an_unknown_action(synth, env):
    s = synth(env)
    roles = iam_audit.audit({k: t for k, t in s.templates.items()})
    assert iam_audit.unknown_actions(roles) == []


def test_the_stack_graph_draws_every_import_between_the_stacks(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    graph = "\n".join(review.stack_graph(report))
    node = {s["name"]: f"s{i}" for i, s in enumerate(report["stacks"], 1)}
    # Read straight from the templates: each Fn::ImportValue names its producer's export.
    for consumer in report["stacks"]:
        text = (synth("dev").outdir / f"{consumer['name']}.template.json").read_text()
        producers = {}
        for name in set(re.findall(r'"Fn::ImportValue": "([^"]+)"', text)):
            producers.setdefault(name.split(":")[0], set()).add(name)
        for producer, names in producers.items():
            assert f'{node[producer]} -->|"{len(names)} export(s)"| {node[consumer["name"]]}' in graph
    assert graph.startswith("```mermaid\nflowchart LR")


def test_the_deploy_estimate_scales_with_type_count_and_deep_health_checks(synth):
    dev, prod = (review.build(synth(e).outdir, with_lint=False)["deploy_plan"] for e in ("dev", "prod"))
    assert all(isinstance(p["minutes"], int) for p in (dev, prod))
    # prod: four p5 with InstanceStress and InstanceConnectivity; dev: one g5 without checks.
    checks = sum(timing.DEEP_HEALTH_CHECK_MINUTES.values())
    assert prod["hyperpod_nodes_minutes"] >= dev["hyperpod_nodes_minutes"] + checks
    one = {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1}
    assert deploy_plan.group_minutes({**one, "InstanceCount": 16}) > deploy_plan.group_minutes(one)
    assert deploy_plan.group_minutes(one) > deploy_plan.group_minutes({"InstanceType": "ml.m5.4xlarge", "InstanceCount": 1})


def test_cost_uses_the_extended_support_rate_only_below_standard_support():
    def eks(version):
        stack = StackSummary("s", {"Resources": {"C": {"Type": "AWS::EKS::Cluster", "Properties": {"Version": version}}}}, [])
        return cost.estimate([stack], "eu-west-1")

    # Amazon EKS pricing: $0.10 per cluster-hour in standard support, $0.60 in extended support.
    assert eks("1.33")["hourly"] == 0.60 and eks("1.35")["hourly"] == 0.10
    assert "eu-west-1 may differ" in "\n".join(cost.markdown(eks("1.35")))


def test_an_export_a_deployed_stack_still_imports_cannot_disappear():
    # CloudFormation: "Export ... cannot be deleted as it is in use by ..." (the deployed importer counts,
    # even if the new synth of the importer no longer imports it).
    producer = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}},
                "Outputs": {"VpcOut": {"Value": {"Ref": "Vpc"}, "Export": {"Name": "net:VpcId"}}}}
    importer = {"Resources": {"Sg": {"Type": "AWS::EC2::SecurityGroup",
                                     "Properties": {"GroupDescription": "x", "VpcId": {"Fn::ImportValue": "net:VpcId"}}}}}
    old = changes.Baseline("deployed", {"net": producer, "app": importer}, whole_app=True)
    new_producer = {"Resources": producer["Resources"]}
    new_importer = {"Resources": {"Sg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "x", "VpcId": "vpc-1"}}}}
    report = changes.compare(old, [StackSummary("net", new_producer, []), StackSummary("app", new_importer, ["net"])], "us-east-1")
    assert report["callouts"] == ["REFUSED: net would stop exporting net:VpcId, which app still imports"]


def _task_governance(version: str | None) -> dict:
    props = {"ClusterName": "hyperpod-dev", "AddonName": "amazon-sagemaker-hyperpod-taskgovernance", "ResolveConflicts": "OVERWRITE"}
    return {"Resources": {"TaskGovernance": {"Type": "AWS::EKS::Addon", "Properties": props | ({"AddonVersion": version} if version else {})}}}


def _governance_update(before: str | None, after: str | None) -> dict:
    old = changes.Baseline("deployed", {"addons": _task_governance(before)}, whole_app=True)
    new = _task_governance(after)
    new["Resources"]["TaskGovernance"]["Properties"]["ConfigurationValues"] = "{}"  # a change, whatever the versions
    return {"changes": changes.compare(old, [StackSummary("addons", new, [])], "us-east-1")}  # as review.build holds it


def test_a_task_governance_update_across_the_kueue_crd_migration_says_what_to_run_first():
    # HyperPod's task governance upgrade page: from v1.3.x to v1.5 or later a plain update-addon fails on
    # the Kueue CRDs' stored versions; back up, clear storedVersions, update, restore. v1.5 to v1.6 needs none.
    report = _governance_update("v1.3.0-eksbuild.1", "v1.6.0-eksbuild.1")
    (line,) = _callouts(report, "MIGRATE FIRST")
    assert "amazon-sagemaker-hyperpod-taskgovernance in addons goes from v1.3.0-eksbuild.1 to v1.6.0-eksbuild.1" in line
    assert '"v1alpha1": missing from spec.versions' in line and "Before cdk deploy" in line
    steps = [line.index(word) for word in ("back up", "storedVersions to", "update-addon", "restore")]
    assert steps == sorted(steps) and "sagemaker-hyperpod-eks-operate-console-ui-governance-upgrade" in line
    assert report["changes"]["changes"] == [{"stack": "addons", "resource": "TaskGovernance", "type": "AWS::EKS::Addon",
                                             "action": "modified", "because": [], "critical": False}]
    text = "\n".join(review._changes_markdown(report["changes"]))
    assert "- **MIGRATE FIRST**: task governance add-on" in text
    for before, after in [("v1.5.0-eksbuild.1", "v1.6.0-eksbuild.1"), ("v1.3.0-eksbuild.1", "v1.3.1-eksbuild.1"), (None, None),
                          ("v1.6.0-eksbuild.1", None)]:
        assert not _callouts(_governance_update(before, after), "MIGRATE FIRST"), (before, after)


def test_pinning_task_governance_past_the_migration_over_an_unpinned_one_says_how_to_check_first():
    # Without AddonVersion EKS installed its default of the day: only the cluster knows whether it is a v1.3.x.
    (line,) = _callouts(_governance_update(None, "v1.6.0-eksbuild.1"), "MIGRATE FIRST")
    assert "where the baseline left the version to EKS" in line
    assert ("aws eks describe-addon --cluster-name hyperpod-dev --addon-name amazon-sagemaker-hyperpod-taskgovernance "
            "--query addon.addonVersion` prints a version below v1.5") in line


def test_a_new_task_governance_add_on_installs_the_current_crds_and_needs_no_migration():
    old = changes.Baseline("deployed", {"addons": {"Resources": {}}}, whole_app=True)
    report = changes.compare(old, [StackSummary("addons", _task_governance("v1.6.0-eksbuild.1"), [])], "us-east-1")
    assert report["changes"][0]["action"] == "added" and not _callouts({"changes": report}, "MIGRATE FIRST")


def test_the_embedded_cdk_diff_is_plain_text_whatever_force_color_says(synth, monkeypatch):
    # FORCE_COLOR=1 is common in CI, and the CDK CLI's colour library obeys it over NO_COLOR.
    from cli.review import changes
    from cli.review.cdk_diff import cdk_diff

    monkeypatch.setenv("FORCE_COLOR", "1")
    s = synth("dev")
    stack = f"{s.settings.prefix}-dev-sample-job"
    text = cdk_diff(s.outdir, changes.Baseline("empty", {stack: {}}, whole_app=False), [stack])[stack]
    assert "[+]" in text and "\x1b" not in text


def _role(*statements) -> dict:
    return {"Type": "AWS::IAM::Role", "Metadata": {"aws:cdk:path": "app/Worker/Role"},
            "Properties": {"Policies": [{"PolicyDocument": {"Statement": list(statements)}}]}}


def test_a_new_write_or_permissions_management_action_on_any_resource_is_called_out():
    # Service Authorization Reference: ec2:CreateTags is Tagging, ec2:RunInstances Write, iam:PassRole Permissions management.
    reads = {"Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"}
    scoped = {"Effect": "Allow", "Action": ["ec2:RunInstances"], "Resource": "arn:aws:ec2:us-east-1:111111111111:instance/*"}
    anywhere = {"Effect": "Allow", "Action": ["ec2:RunInstances", "iam:PassRole", "ec2:CreateTags"], "Resource": "*"}
    from cli.review import deltas

    def stacks(*statements):
        return [StackSummary("app", {"Resources": {"Role": _role(*statements)}}, [])]

    found = deltas.compare(stacks(reads, scoped), stacks(reads, anywhere), "us-east-1", {})
    assert found["callouts"] == [
        "IAM ON ANY RESOURCE: `app/Worker/Role` gains Permissions management on `*`: iam:PassRole",
        "IAM ON ANY RESOURCE: `app/Worker/Role` gains Write on `*`: ec2:RunInstances",
    ]
    assert found["lines"]["iam"][1] == ("IAM `app/Worker/Role`: + ec2:CreateTags (Tagging), iam:PassRole (Permissions management)")
    assert deltas.compare(stacks(reads, anywhere), stacks(reads, scoped), "us-east-1", {})["callouts"] == []


def test_an_open_security_group_rule_added_is_called_out_and_one_closed_is_information():
    from cli.review import deltas

    def stacks(*cidrs):
        group = {"Type": "AWS::EC2::SecurityGroup", "Metadata": {"aws:cdk:path": "net/Sg"}, "Properties": {
            "GroupDescription": "x", "SecurityGroupIngress": [{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": c} for c in cidrs]}}
        vpc = {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}
        return [StackSummary("net", {"Resources": {"Vpc": vpc, "Sg": group}}, [])]

    inside, office, anyone = "10.0.0.0/16", "198.51.100.0/24", "0.0.0.0/0"
    assert deltas.compare(stacks(inside), stacks(inside, office), "us-east-1", {})["callouts"] == [
        "EXPOSURE: security group rule `net/Sg` admits 198.51.100.0/24 (outside the VPC) on tcp 443-443"
    ]
    assert deltas.compare(stacks(office), stacks(anyone), "us-east-1", {})["callouts"] == [
        "EXPOSURE: security group rule `net/Sg` admits 0.0.0.0/0 (outside the VPC) on tcp 443-443 (was 198.51.100.0/24)"
    ]
    closed = deltas.compare(stacks(anyone), stacks(office), "us-east-1", {})
    assert closed["callouts"] == [] and closed["lines"]["exposure"] == [
        "Exposure narrowed: security group rule `net/Sg` no longer admits 0.0.0.0/0 on tcp 443-443"
    ]


def test_stateful_resources_added_and_removed_are_listed_with_their_delete_policy():
    from cli.review import deltas

    bucket = {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain", "Metadata": {"aws:cdk:path": "data/Checkpoints/Resource"}}
    fsx = {"Type": "AWS::FSx::FileSystem", "Metadata": {"aws:cdk:path": "data/Scratch"}, "Properties": {"StorageCapacity": 1200}}
    found = deltas.compare([StackSummary("data", {"Resources": {"F": fsx}}, [])],
                           [StackSummary("data", {"Resources": {"B": bucket}}, [])], "us-east-1", {})
    assert found["lines"]["stateful"] == [
        "Stateful added: S3::Bucket `data/Checkpoints/Resource` (on delete: retain)",
        "Stateful removed: FSx::FileSystem `data/Scratch` (on delete: delete)",
    ]
    assert found["callouts"] == []  # a removed file system is the changes' own REMOVED callout (a critical type)


def test_every_priced_ml_type_is_a_sourced_sagemaker_rate_or_marked_as_the_ec2_floor():
    from infra import catalogue

    for kind in catalogue.CATALOGUE.values():
        rate, how = prices.instance_rate(kind.name)
        if how == "sagemaker":
            assert prices.SAGEMAKER_SOURCES[kind.name], kind.name
            # SageMaker bills the same hardware at or above EC2's rate.
            assert rate >= prices.INSTANCE_FLOOR.get(kind.name, 0), kind.name
        elif how == "floor":
            assert kind.name not in prices.SAGEMAKER_SOURCES
    assert set(prices.SAGEMAKER_SOURCES) == set(prices.SAGEMAKER_RATE)
    groups = [{"InstanceGroupName": "gpu", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
              {"InstanceGroupName": "system", "InstanceType": "ml.m5.4xlarge", "InstanceCount": 1}]
    stack = StackSummary("hp", {"Resources": {"C": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": groups}}}}, [])
    estimate = cost.estimate([stack], "us-east-1")
    p5, m5 = estimate["lines"]
    assert p5["note"].startswith("a floor: EC2 On-Demand rate") and m5["note"].startswith("SageMaker list rate")
    assert p5["floor"] and not m5["floor"]
    assert f"| 2 x ml.p5.48xlarge (gpu) | at least ${p5['hourly']:,.2f} |" in "\n".join(cost.markdown(estimate))  # the line says it
    headline = cost.markdown(estimate)[2]
    assert f"instances at SageMaker list rates ({prices.SAGEMAKER_AS_OF}), except the EC2 floor for ml.p5.48xlarge (" in headline
    one = StackSummary("hp", {"Resources": {"C": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": groups[1:]}}}}, [])
    assert "EC2 floor" not in cost.markdown(cost.estimate([one], "us-east-1"))[2]


def test_a_private_endpoint_made_public_is_called_out_and_made_private_is_information():
    from cli.review import deltas

    def stacks(public: bool):
        vpc = {"EndpointPublicAccess": public, "EndpointPrivateAccess": True} | ({"PublicAccessCidrs": ["198.51.100.0/24"]} if public else {})
        eks = {"Type": "AWS::EKS::Cluster", "Metadata": {"aws:cdk:path": "c/Cluster"}, "Properties": {"ResourcesVpcConfig": vpc, "Version": "1.35"}}
        return [StackSummary("c", {"Resources": {"Cluster": eks}}, [])]

    opened = deltas.compare(stacks(False), stacks(True), "us-east-1", {})
    assert opened["callouts"] == ["EXPOSURE: the Kubernetes API endpoint `c/Cluster` becomes public, admitting 198.51.100.0/24"]
    closed = deltas.compare(stacks(True), stacks(False), "us-east-1", {})
    assert closed["callouts"] == [] and closed["lines"]["exposure"] == [
        "Exposure narrowed: the Kubernetes API endpoint `c/Cluster` is no longer public (admitted 198.51.100.0/24): kubectl "
        "from outside the VPC loses the API"
    ]


def test_nodes_no_team_quota_covers_count_quotas_by_nodes_accelerators_and_mig_slices():
    # A p5 node: 8 H100s, each cut into seven 1g.10gb slices at most (NVIDIA's MIG profile table, infra.catalogue).
    from cli.review import deltas

    def stacks(nodes: int, *quotas: dict):
        cluster = {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [
            {"InstanceGroupName": "gpu", "InstanceType": "ml.p5.48xlarge", "InstanceCount": nodes}]}}
        teams = {f"Q{i}": {"Type": "AWS::SageMaker::ComputeQuota", "Properties": {"ComputeQuotaConfig": {
            "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", **q}]}}} for i, q in enumerate(quotas)}
        return [StackSummary("hp", {"Resources": {"C": cluster, **teams}}, [])]

    one_node, eight_gpus, fifty_six_slices = {"Count": 1}, {"Accelerators": 8}, {"AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 56}}
    before, after = stacks(3, one_node, eight_gpus), stacks(4, one_node, eight_gpus, fifty_six_slices)
    assert deltas.compare(before, after, "us-east-1", {})["lines"]["quotas"][-1] == (
        "Team quotas: 1 of 4 ml.p5.48xlarge node(s) in no team's quota (was 1 of 3)")
    assert deltas.compare(stacks(3), stacks(4), "us-east-1", {})["lines"]["quotas"] == [
        "Quota: ml.p5.48xlarge for cluster usage: 3 -> 4 node(s) at deploy"]  # no teams: nothing to cover


def _cluster_with_volume_key(key) -> dict:
    ebs = {"VolumeSizeInGB": 500} | ({"VolumeKmsKeyId": key} if key else {})
    group = {"InstanceGroupName": "gpu", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2,
             "InstanceStorageConfigs": [{"EbsVolumeConfig": ebs}]}
    return {"Resources": {"Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}}}}


@pytest.mark.parametrize("before, after", [
    ("arn:aws:kms:us-east-1:111111111111:key/1111aaaa-1111-1111-1111-111111111111",
     "arn:aws:kms:us-east-1:111111111111:key/2222bbbb-2222-2222-2222-222222222222"),
    (None, "arn:aws:kms:us-east-1:111111111111:key/2222bbbb-2222-2222-2222-222222222222"),
])
def test_a_groups_volume_key_changed_is_refused_as_hyperpod_refuses_it(before, after):
    # HyperPod's smcluster-cmk page: "KMS key transition isn't currently supported, so you can't change the
    # KMS key specified in your configuration. To use a different key, create a new instance group ..."
    old = changes.Baseline("deployed", {"hyperpod": _cluster_with_volume_key(before)}, whole_app=True)
    report = changes.compare(old, [StackSummary("hyperpod", _cluster_with_volume_key(after), [])], "us-east-1")
    assert report["callouts"] == [
        f"REFUSED: HyperPod cannot change the volume key of instance group gpu in hyperpod (secondary volume "
        f"{before or 'an AWS owned key'} -> {after}); add a new group with the key and remove this one instead"
    ]


def test_the_same_volume_key_is_no_callout():
    key = "arn:aws:kms:us-east-1:111111111111:key/1111aaaa-1111-1111-1111-111111111111"
    old = changes.Baseline("deployed", {"hyperpod": _cluster_with_volume_key(key)}, whole_app=True)
    new = _cluster_with_volume_key(key)
    new["Resources"]["Cluster"]["Properties"]["InstanceGroups"][0]["InstanceCount"] = 3
    report = changes.compare(old, [StackSummary("hyperpod", new, [])], "us-east-1")
    assert report["callouts"] == ["NODE COUNT: instance group gpu in hyperpod goes from 2 to 3 node(s)"]


def test_a_change_that_rolls_the_nodes_without_changing_counts_says_the_gates_wait_again(synth):
    # A deployed AMI release pin removed: the counts stay, the group's nodes are rolled onto the
    # latest release, and the gates, which carry that property, wait again (stacks/hyperpod.py
    # ROLLS_NODES). The deployed templates: the cluster's group and the gates both had the pin.
    after = load_stacks(synth("dev").outdir)
    old = {s.name: json.loads(json.dumps(s.template)) for s in after}
    hp = "hyperpod-dev-hyperpod"
    for r in old[hp]["Resources"].values():
        for group in r["Properties"].get("InstanceGroups", []) if r["Type"] == "AWS::SageMaker::Cluster" else []:
            if group["InstanceGroupName"] == "gpu":
                group["ImageReleaseVersion"] = "1.0.0"
        if r["Type"].startswith("Custom::HyperPod") and "gpu" in r["Properties"].get("NodeSpecs", {}):
            r["Properties"]["NodeSpecs"]["gpu"]["ImageReleaseVersion"] = "1.0.0"
    report = changes.compare(changes.Baseline("deployed", old, whole_app=True), after, "us-east-1")
    (roll,) = report["callouts"]
    assert roll.startswith(f"NODES ROLL: instance group gpu in {hp} changes what its nodes are made with (ImageReleaseVersion 1.0.0 -> None)")
    assert "the node and accelerator gates wait for the group again" in roll


def _eks_cluster(**props) -> dict:
    return {"Resources": {"Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "hyperpod-prod", **props}}}}


def test_a_support_tier_or_deletion_protection_change_is_a_callout_of_its_own():
    # An unset UpgradePolicy is EXTENDED (botocore's eks model, UpgradePolicyRequest: "The default value is EXTENDED").
    import botocore.session

    doc = botocore.session.get_session().get_service_model("eks").shape_for("UpgradePolicyRequest").documentation
    assert "The default value is <code>EXTENDED</code>" in doc
    old = changes.Baseline("deployed", {"cluster": _eks_cluster()}, whole_app=True)

    def callouts(**props) -> list[str]:
        report = {"changes": changes.compare(old, [StackSummary("cluster", _eks_cluster(**props), [])], "us-east-1")}
        return _callouts(report, "SUPPORT TIER") + _callouts(report, "DELETION PROTECTION")

    assert callouts(UpgradePolicy={"SupportType": "EXTENDED"}, DeletionProtection=False) == []
    (tier,) = callouts(UpgradePolicy={"SupportType": "STANDARD"})
    assert "goes from EXTENDED to STANDARD" in tier and "upgrades the control plane itself" in tier and "eks.upgrade_policy" in tier
    (guard,) = callouts(DeletionProtection=True)
    assert "turns deletion protection on" in guard and "cdk destroy" in guard
    old = changes.Baseline("deployed", {"cluster": _eks_cluster(DeletionProtection=True)}, whole_app=True)
    (guard,) = callouts(DeletionProtection=False)
    assert "turns deletion protection off" in guard


def _hyperpod(groups: list[dict]) -> dict:
    return {"Resources": {"Cluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": groups}}}}


def test_auto_patching_turned_on_says_it_cordons_the_whole_group_for_up_to_a_day():
    # botocore's sagemaker model, ClusterAutoPatchConfig: both idle strategies cordon all instances; the idle
    # window defaults to 86400 s.
    gpu = {"InstanceGroupName": "gpu", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 4}
    patched = {**gpu, "AutoPatchConfig": {"PatchingStrategy": "WhenAllIdle"}}
    old = changes.Baseline("deployed", {"hyperpod": _hyperpod([gpu])}, whole_app=True)
    report = {"changes": changes.compare(old, [StackSummary("hyperpod", _hyperpod([patched]), [])], "us-east-1")}
    (line,) = _callouts(report, "AUTO PATCH")
    assert "instance group gpu in hyperpod: WhenAllIdle cordons all 4 instance(s)" in line
    assert "32 accelerators" in line and "86,400 s" in line and "ClusterAutoPatchConfig" in line
    same = changes.Baseline("deployed", {"hyperpod": _hyperpod([patched])}, whole_app=True)
    report = {"changes": changes.compare(same, [StackSummary("hyperpod", _hyperpod([patched]), [])], "us-east-1")}
    assert not _callouts(report, "AUTO PATCH")
