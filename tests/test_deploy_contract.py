"""The contract a first `cdk deploy --all` depends on, each part held against its source: the
readiness gates against CloudFormation's and Lambda's limits, the AWS reference templates and
the documented deep health checks; who may reach the cluster and how it is exposed. What an
update and a teardown depend on: test_teardown_contract.py; the chart and the images the
nodes pull: test_chart_contract.py."""

from __future__ import annotations

import json
import re

import pytest

from infra import config, readiness, timing, validation
from tests.conftest import ENVIRONMENTS, GATED, patched_context


# ---------------------------------------------------------------- readiness gates


def _custom_resources(template: dict) -> dict:
    return {
        k: r for k, r in template["Resources"].items()
        if r["Type"].startswith("Custom::") or r["Type"] == "AWS::CloudFormation::CustomResource"
    }


def _service_function(s, suffix: str, token) -> tuple[str, dict]:
    """(stack, Lambda resource) a ServiceToken leads to, imports followed."""
    if "Fn::ImportValue" in token:
        suffix, token = s.exported(token["Fn::ImportValue"])
    (lid, attr) = token["Fn::GetAtt"]
    function = s.templates[suffix]["Resources"][lid]
    assert function["Type"] == "AWS::Lambda::Function" and attr == "Arn", (suffix, lid)
    return suffix, function


def _waiter(s, suffix: str, function: dict) -> dict | None:
    """aws-cdk-lib's provider framework with an isComplete handler: the user functions'
    timeouts and the waiter state machine's Retry block (interval, attempts; backoff 1)."""
    env = function["Properties"].get("Environment", {}).get("Variables", {})
    if "WAITER_STATE_MACHINE_ARN" not in env:
        return None
    resources = s.templates[suffix]["Resources"]
    machine = resources[env["WAITER_STATE_MACHINE_ARN"]["Ref"]]["Properties"]["DefinitionString"]
    text = "".join(p for p in machine["Fn::Join"][1] if isinstance(p, str))
    ((interval, attempts, backoff),) = re.findall(r'"IntervalSeconds":(\d+),"MaxAttempts":(\d+),"BackoffRate":(\d+)', text)
    assert backoff == "1"

    def timeout(name: str) -> int:
        return resources[env[name]["Fn::GetAtt"][0]]["Properties"].get("Timeout", 3)

    return {"interval": int(interval), "attempts": int(attempts),
            "on_event": timeout("USER_ON_EVENT_FUNCTION_ARN"), "is_complete": timeout("USER_IS_COMPLETE_FUNCTION_ARN")}


def _longest_answer_seconds(s, suffix: str, resource: dict) -> tuple[int, dict | None]:
    """How long a custom resource's provider may take to answer CloudFormation, if every call
    ran to its Lambda timeout: one invocation, or the start handler plus every attempt of the
    provider framework's waiter (the interval, then the check)."""
    suffix, function = _service_function(s, suffix, resource["Properties"]["ServiceToken"])
    waiter = _waiter(s, suffix, function)
    if waiter is None:
        return function["Properties"].get("Timeout", 3), None
    return waiter["on_event"] + waiter["attempts"] * (waiter["interval"] + waiter["is_complete"]), waiter


@pytest.mark.parametrize("env", GATED)
def test_no_custom_resource_can_wait_longer_than_cloudformation_waits_for_it(synth, env):
    # CloudFormation fails a custom resource that has not answered within its ServiceTimeout
    # (1-3600 s, default 3600: CloudFormation User Guide; aws-cdk-lib's CustomResource checks
    # the same range, which this asks it for).
    import aws_cdk as cdk

    app = cdk.App()
    stack = cdk.Stack(app, "Probe")
    cdk.CustomResource(stack, "Max", service_token="arn:aws:lambda:us-east-1:111111111111:function:x",
                       service_timeout=cdk.Duration.seconds(timing.SERVICE_TIMEOUT_MAX_S))
    with pytest.raises(Exception, match="between 1 and 3600"):
        cdk.CustomResource(stack, "Over", service_token="arn:aws:lambda:us-east-1:111111111111:function:x",
                           service_timeout=cdk.Duration.seconds(timing.SERVICE_TIMEOUT_MAX_S + 1))
    s = synth(env)
    checked = 0
    for suffix, template in s.templates.items():
        for lid, resource in _custom_resources(template).items():
            limit = int(resource["Properties"].get("ServiceTimeout", timing.SERVICE_TIMEOUT_MAX_S))
            answer, waiter = _longest_answer_seconds(s, suffix, resource)
            assert answer <= limit, (suffix, lid, answer, limit)
            if resource["Type"].startswith("Custom::HyperPod"):
                # Ours say so explicitly, and their own deadline fires while the framework still
                # has attempts left (at most one check per interval has run by then).
                assert "ServiceTimeout" in resource["Properties"], lid
                assert int(resource["Properties"]["LinkSeconds"]) // waiter["interval"] + 1 < waiter["attempts"]
            checked += 1
    assert checked


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_node_gate_waits_past_the_documented_deep_health_checks_in_links(synth, env):
    # HyperPod docs (Create a NodeClass): "a DHC takes around 60-90 minutes to complete";
    # prod's p5 group has both checks, so the chain must last past 90 minutes plus a boot.
    s = synth(env)
    links = sorted(s.resources("hyperpod", "Custom::HyperPodNodesReady").values(), key=lambda r: r["Properties"]["Link"])
    total = sum(int(r["Properties"]["LinkSeconds"]) for r in links)
    assert {r["Properties"]["TotalSeconds"] for r in links} == {str(total)}
    assert [r["Properties"]["Link"] for r in links] == [f"{i}/{len(links)}" for i in range(1, len(links) + 1)]
    checked = [g for g in s.settings.hyperpod.instance_groups if g.health_checks]
    if checked:
        assert total >= (90 + timing.BOOT_MINUTES["efa-cluster"]) * 60
        assert len(links) > 1
    # Each link waits for the one before it.
    ids = {r["Properties"]["Link"]: k for k, r in s.resources("hyperpod", "Custom::HyperPodNodesReady").items()}
    for i in range(2, len(links) + 1):
        assert ids[f"{i - 1}/{len(links)}"] in s.resources("hyperpod", "Custom::HyperPodNodesReady")[ids[f"{i}/{len(links)}"]]["DependsOn"]


@pytest.mark.parametrize("env", GATED)
def test_the_accelerator_gate_waits_for_what_the_job_asks_of_each_node_before_anything_runs_on_them(synth, env):
    s = synth(env)
    gates = s.resources("hyperpod", "Custom::HyperPodAcceleratorsReady")
    accelerated = [g for g in s.settings.hyperpod.instance_groups if g.count > 0 and g.spec.is_accelerated]
    if not accelerated:
        assert gates == {}
        return
    groups = {k: v for k, v in next(iter(gates.values()))["Properties"]["Groups"].items()}
    assert set(groups) == {g.name for g in accelerated}
    # After the last link of the node gate.
    nodes = s.resources("hyperpod", "Custom::HyperPodNodesReady")
    last = max(nodes, key=lambda k: nodes[k]["Properties"]["Link"])
    first = min(gates, key=lambda k: gates[k]["Properties"]["Link"])
    assert last in gates[first]["DependsOn"]
    # The job's pods ask for exactly what the gate waits to see allocatable (a whole node), or
    # for one slice of those the gate waits for (a job on a MIG slice).
    if "sample-job" in s.templates:
        job = next(o for o in s.manifests("sample-job") if o["kind"] == "HyperPodPyTorchJob")
        template = job["spec"]["replicaSpecs"][0]["template"]["spec"]
        requests = template["containers"][0]["resources"]["requests"]
        wanted = groups[s.settings.sample_job.instance_group]["Resources"]
        if s.settings.sample_job.gpu_partition:
            devices = {r: n for r, n in requests.items() if "/" in r}
            assert devices == {f"nvidia.com/mig-{s.settings.sample_job.gpu_partition}": 1} and set(devices) <= set(wanted)
        else:
            assert {r: str(requests[r]) for r in wanted} == wanted
        manifest = json.loads((s.outdir / "manifest.json").read_text())
        assert f"{s.settings.prefix}-{s.settings.env_name}-hyperpod" in _all_dependencies(manifest, f"{s.settings.prefix}-{s.settings.env_name}-sample-job")


def _all_dependencies(manifest: dict, artifact: str) -> set[str]:
    out, todo = set(), [artifact]
    while todo:
        for dep in manifest["artifacts"][todo.pop()].get("dependencies", []):
            if dep not in out:
                out.add(dep)
                todo.append(dep)
    return out


def test_the_accelerator_gate_may_list_nodes_and_nothing_else(synth):
    s = synth("prod")
    (access,) = [r for r in s.resources("hyperpod", "AWS::EKS::AccessEntry").values()]
    assert access["Properties"]["KubernetesGroups"] == [readiness.NODE_READERS]
    assert "AccessPolicies" not in access["Properties"]
    rbac = readiness.node_reader_rbac()
    (role,) = [o for o in rbac if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    (binding,) = [o for o in rbac if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": readiness.NODE_READERS}]
    # Its check runs in the VPC, where a private endpoint answers.
    checks = [r for k, r in s.resources("hyperpod", "AWS::Lambda::Function").items() if k.startswith("AcceleratorsReadyIsComplete")]
    assert checks and "VpcConfig" in checks[0]["Properties"]


def test_the_hyperpod_cluster_waits_for_the_policies_its_nodes_assume(synth):
    # The quick setup (sagemaker-iam-role-template.yaml) writes the node grants into the role,
    # so the cluster's reference to the role orders them; ours are attached managed policies.
    for env in ("prod", "karpenter"):
        s = synth(env)
        (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
        policies = {k for k, r in s.resources("hyperpod", "AWS::IAM::ManagedPolicy").items()
                    if any(k2 in json.dumps(r["Properties"].get("Roles", [])) for k2 in ("ExecutionRole", "AutoscalerRole"))}
        assert policies and policies <= set(cluster["DependsOn"]), (env, policies)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_node_gate_follows_the_cluster_and_asks_for_every_group(synth, env):
    s = synth(env)
    (gate_id, gate), = [(k, r) for k, r in s.resources("hyperpod", "Custom::HyperPodNodesReady").items() if r["Properties"]["Link"].startswith("1/")]
    (cluster_id,) = s.resources("hyperpod", "AWS::SageMaker::Cluster")
    props = gate["Properties"]
    assert cluster_id in gate["DependsOn"]
    assert props["InstanceGroups"] == {g.name: str(g.count) for g in s.settings.hyperpod.instance_groups}
    assert props["Link"].startswith("1/")
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
        return [], validation.load_settings(patched_context(env, patch), env)[1]
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


def test_the_review_shows_an_endpoint_open_to_the_internet(synth):
    from cli.review import report as review

    report = review.build(synth("dev").outdir, with_lint=False)
    assert any("eks.public_access_cidrs" in w and "0.0.0.0/0" in w for w in report["warnings"])
    assert "## Warnings" in review.to_markdown(report)
