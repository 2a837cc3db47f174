"""The contract a first `cdk deploy --all` depends on, each part held against its source:
the AWS reference templates, FACTS, the chart's own values, and the SageMaker API's shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from infra import config
from infra.handlers import hyperpod_nodes
from stacks.cluster import chart_values
from tests.conftest import CONTEXT, ENVIRONMENTS, patched_context

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- readiness gates


def _node(group: str, status: str, i: int) -> dict:
    """One ClusterNodeSummaries entry in the shape botocore validates."""
    return {
        "InstanceGroupName": group,
        "InstanceId": f"i-0{i:016x}",
        "InstanceType": "ml.g5.8xlarge",
        "LaunchTime": "2026-12-02T10:00:00Z",
        "InstanceStatus": {"Status": status},
    }


def _sagemaker(*pages: list[dict]):
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for i, nodes in enumerate(pages):
        response = {"ClusterNodeSummaries": nodes}
        expected = {"ClusterName": "hyperpod-prod"}
        if i + 1 < len(pages):
            response["NextToken"] = f"page{i + 1}"
        if i:
            expected["NextToken"] = f"page{i}"
        stub.add_response("list_cluster_nodes", response, expected)
    stub.activate()
    return client


def _event(request="Create", deadline=None):
    return {
        "RequestType": request,
        "PhysicalResourceId": "hyperpod-prod",
        "ResourceProperties": {
            "ClusterName": "hyperpod-prod",
            "Region": "us-east-1",
            "InstanceGroups": {"system": "2", "gpu": "4"},
            "TimeoutSeconds": "6600",
        },
        "Data": {"Deadline": str(deadline if deadline is not None else 10**10)},
    }


def test_the_node_gate_is_done_only_when_every_group_has_its_count_running_across_pages():
    running = [_node("system", "Running", i) for i in range(2)] + [_node("gpu", "Running", 10 + i) for i in range(3)]
    client = _sagemaker(running, [_node("gpu", "Running", 20)])
    assert hyperpod_nodes.is_complete(_event(), None, client=client) == {"IsComplete": True}


def test_the_node_gate_keeps_waiting_while_nodes_boot_or_run_health_checks():
    nodes = [_node("system", "Running", 0), _node("system", "Running", 1)] + [
        _node("gpu", s, i) for i, s in enumerate(["Running", "Pending", "DeepHealthCheckInProgress", "Running"], 10)
    ]
    assert hyperpod_nodes.is_complete(_event(), None, client=_sagemaker(nodes)) == {"IsComplete": False}


def test_the_node_gate_fails_at_its_deadline_naming_the_short_group_and_how_to_look():
    nodes = [_node("system", "Running", 0), _node("system", "Running", 1), _node("gpu", "Pending", 2)]
    with pytest.raises(TimeoutError) as err:
        hyperpod_nodes.is_complete(_event(deadline=100), None, client=_sagemaker(nodes), now=lambda: 101)
    message = str(err.value)
    assert "gpu has 0 of 4 Running (1 Pending)" in message and "system" not in message.split("min:")[1].split(".")[0]
    assert "aws sagemaker list-cluster-nodes --cluster-name hyperpod-prod --region us-east-1" in message


def test_the_node_gate_sets_its_own_deadline_and_never_waits_on_delete():
    started = hyperpod_nodes.on_event(_event(), None)
    assert started["PhysicalResourceId"] == "hyperpod-prod" and int(started["Data"]["Deadline"]) > 0
    assert hyperpod_nodes.on_event(_event("Delete"), None) == {"PhysicalResourceId": "hyperpod-prod"}
    assert hyperpod_nodes.is_complete(_event("Delete"), None, client=object()) == {"IsComplete": True}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_node_gate_follows_the_cluster_and_asks_for_every_group(synth, env):
    s = synth(env)
    (gate_id, gate), = s.resources("hyperpod", "Custom::HyperPodNodesReady").items()
    (cluster_id,) = s.resources("hyperpod", "AWS::SageMaker::Cluster")
    props = gate["Properties"]
    assert cluster_id in gate["DependsOn"]
    assert props["InstanceGroups"] == {g.name: str(g.count) for g in s.settings.hyperpod.instance_groups}
    assert props["ClusterName"] == s.settings.hyperpod_cluster_name
    # Its only grant reads nodes of this account's clusters in this region.
    policies = [p for p in s.resources("hyperpod", "AWS::IAM::Policy").values() if "sagemaker:ListClusterNodes" in json.dumps(p)]
    (policy,) = policies
    (st,) = [st for st in policy["Properties"]["PolicyDocument"]["Statement"] if st["Action"] == "sagemaker:ListClusterNodes"]
    assert st["Resource"] == f"arn:aws:sagemaker:{s.settings.region}:{s.settings.account}:cluster/*"
    # Every later stack needs nodes: each depends on the hyperpod stack, gate included.
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    assert f"hyperpod-{env}-hyperpod" in manifest["artifacts"][f"hyperpod-{env}-addons"]["dependencies"]


def test_each_team_namespace_is_waited_for_after_its_quota_and_before_the_job(synth):
    s = synth("prod")
    gates = {r["Properties"]["ObjectName"]: r for r in s.resources("addons", "Custom::AWSCDK-EKS-KubernetesObjectValue").values()
             if r["Properties"]["ObjectType"] == "namespace"}
    # What task governance creates for each team (FACTS: hyperpod-ns-<team>).
    assert set(gates) == {"hyperpod-ns-ml-research", "hyperpod-ns-ml-production"}
    quotas = {r["Properties"]["ComputeQuotaTarget"]["TeamName"]: k for k, r in s.resources("addons", "AWS::SageMaker::ComputeQuota").items()}
    for team, quota_id in quotas.items():
        assert gates[f"hyperpod-ns-{team}"]["Properties"]["JsonPath"] == ".status.phase"
        assert quota_id in gates[f"hyperpod-ns-{team}"]["DependsOn"]
    # The job's stack starts only once the addons stack, these waits included, is done.
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    assert "hyperpod-prod-addons" in manifest["artifacts"]["hyperpod-prod-sample-job"]["dependencies"]


# ---------------------------------------------------------------- access and exposure


def _problems(patch: dict, env: str = "dev") -> tuple[list[str], list[str]]:
    try:
        return [], config.load_settings(patched_context(env, patch), env)[1]
    except config.ConfigError as err:
        return err.problems, err.warnings


def test_a_deploy_without_an_admin_principal_is_refused_with_how_to_find_one():
    errors, _ = _problems({"eks": {"admin_principal_arns": []}})
    (line,) = [e for e in errors if "eks.admin_principal_arns" in e]
    assert "aws sts get-caller-identity" in line


def test_an_sts_session_arn_is_refused_with_the_role_arn_to_use_instead():
    errors, _ = _problems({"eks": {"admin_principal_arns": ["arn:aws:sts::111111111111:assumed-role/Admin/alice"]}})
    assert any("arn:aws:iam::111111111111:role/Admin" in e and "STS session" in e for e in errors)


def test_an_endpoint_open_to_the_internet_is_an_error_where_stacks_are_protected_and_a_warning_elsewhere():
    open_endpoint = {"eks": {"endpoint_access": "public_and_private", "public_access_cidrs": ["0.0.0.0/0"]}}
    errors, _ = _problems(open_endpoint, env="prod")
    assert any(e.startswith("prod: eks.public_access_cidrs:") and "0.0.0.0/0" in e for e in errors)
    errors, warnings = _problems(open_endpoint, env="dev")
    assert not errors and any("eks.public_access_cidrs" in w for w in warnings)
    assert not _problems({"eks": {"endpoint_access": "public_and_private", "public_access_cidrs": ["203.0.113.0/24"]}}, "prod")[0]


def test_warnings_are_still_shown_when_there_are_errors():
    errors, warnings = _problems({"eks": {"version": "1.34"}, "sample_job": {"nodes": 99}})
    assert errors and any("eks.version" in w for w in warnings)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_cluster_stack_prints_the_commands_to_reach_the_cluster(synth, env):
    s = synth(env)
    outputs = {k: v["Value"] for k, v in s.templates["cluster"]["Outputs"].items() if not k.startswith("Exports")}
    text = json.dumps(outputs)
    assert f"aws eks update-kubeconfig --region {s.settings.region} --name {s.settings.eks_cluster_name}" in text
    assert "kubectl get nodes" in text
    assert s.settings.eks.admin_principal_arns[0] in text


# ---------------------------------------------------------------- updates and teardown


def _exports(s) -> set[str]:
    return {o["Export"]["Name"] for t in s.templates.values() for o in t.get("Outputs", {}).values() if "Export" in o}


def _imports(template: dict) -> set[str]:
    return set(re.findall(r'"Fn::ImportValue": "([^"]+)"', json.dumps(template)))


def test_switching_the_sample_job_off_keeps_every_export_it_imports(synth):
    # FACTS: a strong reference's export disappears with its consumer; CloudFormation then
    # refuses the producer's update while the deployed consumer still imports it. (Task
    # governance lives in the addons stack, so switching it off removes no stack.)
    full = synth("prod")
    without = synth("prod", {"sample_job": {"enabled": False}})
    assert "sample-job" not in without.templates
    assert _imports(full.templates["sample-job"]) <= _exports(without)


def _retained(template: dict) -> set[str]:
    return {k for k, r in template["Resources"].items() if r.get("DeletionPolicy") == "Retain"}


def _references(s, suffix: str, resource: dict) -> set[tuple[str, str]]:
    """(stack, logical id) of every resource `resource` refers to, imports followed."""
    def refs(value) -> set[str]:
        return set(re.findall(r'"(?:Ref|Fn::GetAtt)": \["?([A-Za-z0-9]+)', json.dumps(value)))

    props = resource.get("Properties", {})
    out = {(suffix, lid) for lid in refs(props) | set(resource.get("DependsOn", []))}
    for name in re.findall(r'"Fn::ImportValue": "([^"]+)"', json.dumps(props)):
        producer, exported = s.exported(name)
        out |= {(producer, lid) for lid in refs(exported)}
    return {(st, lid) for st, lid in out if lid in s.templates[st]["Resources"]}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_no_retained_resource_sits_on_a_resource_that_teardown_deletes(synth, env):
    # FACTS: a kept resource whose VPC, subnets or security group are deleted fails the delete.
    s = synth(env)
    blocking = []
    for suffix, template in s.templates.items():
        for lid in _retained(template):
            for stack, ref in _references(s, suffix, template["Resources"][lid]):
                if ref not in _retained(s.templates[stack]):
                    blocking.append((suffix, lid, stack, ref))
    assert blocking == []


def test_the_eks_cluster_is_deleted_on_teardown_even_in_prod(synth):
    (cluster,) = synth("prod").resources("cluster", "AWS::EKS::Cluster").values()
    assert cluster.get("DeletionPolicy", "Delete") == "Delete"


# ---------------------------------------------------------------- network and chart


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_nodes_may_send_anywhere_as_both_references_allow(synth, env):
    # awsome nested-stacks/security-group-stack.yaml: all traffic to itself and to 0.0.0.0/0.
    t = synth(env).templates["network"]["Resources"]
    (sg_id,) = [k for k, r in t.items() if r["Type"] == "AWS::EC2::SecurityGroup" and k.startswith("EfaSecurityGroup")]
    egress = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    ours = [e for e in egress if e["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}]
    assert {"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"} in [{k: e[k] for k in ("IpProtocol", "CidrIp") if k in e} for e in ours]


def _chart_keys() -> tuple[str, set[str]]:
    lines = (ROOT / "tests/fixtures/hyperpod_chart_value_keys.txt").read_text().splitlines()
    (revision,) = re.findall(r"revision ([0-9a-f]{40})", "\n".join(lines[:3]))
    return revision, {line for line in lines if line and not line.startswith("#")}


def test_the_chart_is_pinned_to_the_revision_its_value_keys_were_read_from():
    revision, _ = _chart_keys()
    assert CONTEXT["defaults"]["hyperpod"]["helm_chart"]["revision"] == revision == "a00b22d17ea928a6e39a43bd2efdafe01b1005ea"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_chart_values_set_only_keys_the_chart_has(env):
    _, keys = _chart_keys()
    settings = config.load_settings(CONTEXT, env)[0]

    def leaves(value, prefix=""):
        if isinstance(value, dict):
            return {p for k, v in value.items() for p in leaves(v, f"{prefix}{k}.")}
        return {prefix.rstrip(".")}

    assert leaves(chart_values(settings)) <= keys


def test_the_review_shows_an_endpoint_open_to_the_internet(synth):
    from cli import review

    report = review.build(synth("dev").outdir, with_lint=False)
    assert any("eks.public_access_cidrs" in w and "0.0.0.0/0" in w for w in report["warnings"])
    assert "## Warnings" in review.to_markdown(report)
