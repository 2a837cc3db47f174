"""preflight's drift section: the deployed cluster against config, each difference said as
expected (Karpenter, continuous provisioning, auto-patching, a chart pin change) or not (a count,
an add-on or a group changed outside the templates). The account is botocore Stubbers whose
responses botocore validates against its SageMaker, EKS and CloudFormation models."""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import Stubber

from cli import preflight, upgrade_plan
from infra import config, validation
from infra.naming import CHART_REVISION_OUTPUT
from tests.conftest import CAPABILITIES, patched_context

REGION = "us-east-1"
ACCOUNT = "111111111111"
LAUNCHED = datetime.datetime(2026, 11, 30, 8, 0, tzinfo=datetime.timezone.utc)
OLD_CHART = "40eb213" + "0" * 33

# The karpenter capability, with two add-on pins, as a deployed cluster's config.
PATCH = {**CAPABILITIES["karpenter"], "eks": {"core_addons": {"coredns": {"version": "v1.13.1-eksbuild.1"}}},
         "addons": {"training_operator": {"version": "v1.2.1-eksbuild.1"}}}


def _client(service: str):
    client = boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def _group(name, itype, current, target, status, release):
    return {"InstanceGroupName": name, "InstanceType": itype, "CurrentCount": current, "TargetCount": target, "Status": "InService",
            "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hyperpod-exec", "ThreadsPerCore": 1,
            "ImageVersionStatus": status, "CurrentImageReleaseVersion": release}


def _node(group, itype, i, image_status="UpToDate", status="Running"):
    return {"InstanceGroupName": group, "InstanceId": f"i-0{group[:3]}{i:013d}", "InstanceType": itype, "LaunchTime": LAUNCHED,
            "InstanceStatus": {"Status": status}, "ImageVersionStatus": image_status}


def deployed_account(settings: config.Settings) -> dict:
    """The account as it answers for a cluster changed outside its templates: the system group's
    target raised by hand to 2 (one node so far) on an AMI with an update available, Karpenter at
    3 gpu nodes (one behind on a security update), a group added in the console, CoreDNS updated
    past its pin, cert-manager removed, and the chart deployed at an older revision."""
    name = settings.hyperpod_cluster_name
    sagemaker, sm = _client("sagemaker")
    sm.add_response("describe_cluster", {
        "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345", "ClusterName": name, "ClusterStatus": "InService",
        "InstanceGroups": [
            _group("system", "ml.m5.4xlarge", 1, 2, "UpdateAvailable", "1.0.0"),
            _group("gpu", "ml.g5.8xlarge", 3, 3, "UpToDate", "1.0.1"),
            _group("debug", "ml.m5.4xlarge", 1, 1, "UpToDate", "1.0.1"),
        ],
    }, {"ClusterName": name})
    # Two pages: the nodes of a group are counted across NextToken.
    sm.add_response("list_cluster_nodes", {"NextToken": "page-2", "ClusterNodeSummaries": [
        _node("system", "ml.m5.4xlarge", 1), _node("gpu", "ml.g5.8xlarge", 1), _node("gpu", "ml.g5.8xlarge", 2, "SecurityUpdateRequired")]},
        {"ClusterName": name})
    sm.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [_node("gpu", "ml.g5.8xlarge", 3, status="DeepHealthCheckInProgress"),
                                                                   _node("debug", "ml.m5.4xlarge", 1)]},
                    {"ClusterName": name, "NextToken": "page-2"})
    # One scaling in progress: HyperPod's handle on it (ListClusterOperations, DescribeClusterOperation).
    sm.add_response("list_cluster_operations", {"ClusterOperationSummaries": [
        {"OperationId": "op-0123456789", "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345", "Type": "Scaling",
         "Status": "InProgress", "CreationTime": LAUNCHED}]}, {"ClusterName": name, "Status": "InProgress"})
    sm.add_response("describe_cluster_operation", {
        "OperationId": "op-0123456789", "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345", "Type": "Scaling",
        "Status": "InProgress", "CreationTime": LAUNCHED,
        "ScalingDetails": [{"InstanceGroupName": "system", "Status": "InProgress", "Original": {"TargetCount": 1},
                            "Desired": {"TargetCount": 2}}]}, {"ClusterName": name, "OperationId": "op-0123456789"})
    eks, ek = _client("eks")
    running = {"coredns": "v1.13.2-eksbuild.4", "amazon-sagemaker-hyperpod-training-operator": "v1.2.1-eksbuild.1"}
    for addon in upgrade_plan.addons_of(settings):
        params = {"clusterName": settings.eks_cluster_name, "addonName": addon.name}
        if addon.name == "cert-manager":
            ek.add_client_error("describe_addon", service_error_code="ResourceNotFoundException", http_status_code=404, expected_params=params)
            continue
        ek.add_response("describe_addon", {"addon": {"addonName": addon.name, "clusterName": settings.eks_cluster_name, "status": "ACTIVE",
                                                     "addonVersion": running.get(addon.name, "v1.0.0-eksbuild.1")}}, params)
    cfn, cf = _client("cloudformation")
    stack = settings.stack_name("hyperpod")
    cf.add_response("describe_stacks", {"Stacks": [{"StackName": stack, "CreationTime": LAUNCHED, "StackStatus": "UPDATE_COMPLETE",
                                                    "Outputs": [{"OutputKey": CHART_REVISION_OUTPUT, "OutputValue": OLD_CHART}]}]},
                    {"StackName": stack})
    for stub in (sm, ek, cf):
        stub.activate()
    return {"sagemaker": sagemaker, "eks": eks, "cloudformation": cfn, "stubs": (sm, ek, cf)}


def drift(settings: config.Settings) -> list[preflight.Result]:
    account = deployed_account(settings)
    stubs = account.pop("stubs")
    aws = preflight.Clients(None, REGION, account)
    results = [r for check in preflight.DRIFT_CHECKS for r in check(settings, aws)]
    for stub in stubs:
        stub.assert_no_pending_responses()
    return results


@pytest.fixture(scope="module")
def results():
    settings = validation.load_settings(patched_context("dev", PATCH), "dev")[0]
    return {r.check: r for r in drift(settings)}


def test_a_karpenter_scaled_group_is_expected_to_differ_from_its_count(results):
    gpu = results["drift gpu nodes"]
    assert gpu.status == "pass" and "Karpenter-scaled from 0 to 4" in gpu.detail and "expected" in gpu.detail
    assert "not Running: 1 DeepHealthCheckInProgress" in gpu.detail  # a passing state: still pass


def test_a_failed_node_turns_an_expected_count_into_one_to_look_at():
    settings = validation.load_settings(patched_context("dev", {}), "dev")[0]
    sagemaker, sm = _client("sagemaker")
    sm.add_response("describe_cluster", {"ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345",
                                         "ClusterName": settings.hyperpod_cluster_name, "ClusterStatus": "InService",
                                         "InstanceGroups": [_group("system", "ml.m5.4xlarge", 1, 1, "UpToDate", "1.0.0"),
                                                            _group("gpu", "ml.g5.8xlarge", 1, 1, "UpToDate", "1.0.0")]})
    sm.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [_node("system", "ml.m5.4xlarge", 1),
                                                                   _node("gpu", "ml.g5.8xlarge", 1, status="Failure")]})
    sm.activate()
    results = {r.check: r for r in preflight.check_drift_nodes(settings, preflight.Clients(None, REGION, {"sagemaker": sagemaker}))}
    assert results["drift system nodes"].status == "pass"
    assert results["drift gpu nodes"].status == "warn" and "not Running: 1 Failure" in results["drift gpu nodes"].detail


def test_a_count_changed_outside_the_templates_is_not(results):
    system = results["drift system nodes"]
    assert system.status == "warn" and "target 2, config says 1" in system.detail
    assert "put 2 in config to keep it" in system.action and "sets it back to 1" in system.action


def test_a_group_added_outside_the_templates_is_named(results):
    debug = results["drift debug nodes"]
    assert debug.status == "warn" and "not in config" in debug.detail and "--instance-groups-to-delete debug" in debug.action


def test_ami_status_per_group_with_the_nodes_behind(results):
    assert results["drift system AMI"].status == "warn" and "a newer HyperPod AMI release is available" in results["drift system AMI"].detail
    assert "upgrade-plan" in results["drift system AMI"].action
    gpu = results["drift gpu AMI"]
    assert gpu.status == "pass" and "1 node(s) behind" in gpu.detail  # the group says UpToDate, one node does not


def test_an_add_on_past_its_pin_fails_the_next_deploy_and_a_missing_one_is_reinstalled(results):
    coredns = results["drift add-on coredns"]
    assert coredns.status == "fail" and "newer than the pin v1.13.1-eksbuild.1" in coredns.detail
    assert "eks.core_addons.coredns.version" in coredns.action
    assert results["drift add-on amazon-sagemaker-hyperpod-training-operator"].status == "pass"
    cert_manager = results["drift add-on cert-manager"]
    assert cert_manager.status == "warn" and "not installed" in cert_manager.detail and "aws eks create-addon" in cert_manager.action
    assert "not pinned" in results["drift add-on vpc-cni"].detail


def test_the_chart_revision_deployed_against_the_pin(results):
    chart = results["drift chart"]
    assert chart.status == "pass" and f"deployed {OLD_CHART[:12]}" in chart.detail and "expected after a pin change" in chart.detail


def test_auto_patching_past_a_pinned_release_is_expected():
    patch = {"hyperpod": {"instance_groups": [
        {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 2, "image_release_version": "1.0.0",
         "auto_patch": {"strategy": "WhenIdle"}},
        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1}]}}
    settings = validation.load_settings(patched_context("dev", patch), "dev")[0]
    sagemaker, sm = _client("sagemaker")
    sm.add_response("describe_cluster", {"ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345",
                                         "ClusterName": settings.hyperpod_cluster_name, "ClusterStatus": "InService",
                                         "InstanceGroups": [_group("system", "ml.m5.4xlarge", 2, 2, "UpdateAvailable", "1.0.2")]})
    sm.add_response("list_cluster_nodes", {"ClusterNodeSummaries": []})
    sm.activate()
    results = {r.check: r for r in preflight.check_drift_images(settings, preflight.Clients(None, REGION, {"sagemaker": sagemaker}))}
    assert results["drift system AMI"].status == "pass" and "expected: auto_patch rolls it" in results["drift system AMI"].detail
    pin = results["drift system AMI pin"]
    assert pin.status == "pass" and "runs 1.0.2, config pins 1.0.0" in pin.detail


def test_no_deployed_cluster_is_one_line_and_nothing_else_is_asked():
    settings = validation.load_settings(patched_context("dev", {}), "dev")[0]
    sagemaker, sm = _client("sagemaker")
    sm.add_client_error("describe_cluster", service_error_code="ResourceNotFound", http_status_code=400)
    sm.activate()
    aws = preflight.Clients(None, REGION, {"sagemaker": sagemaker})  # no EKS or CloudFormation client: none may be asked
    results = [r for check in preflight.DRIFT_CHECKS for r in check(settings, aws)]
    assert [(r.status, r.section) for r in results] == [("pass", "drift")] and "nothing to compare" in results[0].detail


def test_the_table_shows_drift_as_its_own_section(results):
    text = preflight.table([preflight.Result("account", "pass", "credentials are for 111111111111"), *results.values()])
    lines = text.splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("-- drift"))
    assert lines[header + 1].startswith("drift ") and not any(l.startswith("drift ") for l in lines[:header])


@pytest.mark.parametrize(("running", "status"), [("v1.3.1-eksbuild.1", "fail"), ("v1.5.0-eksbuild.1", "warn")])
def test_a_task_governance_pin_across_the_kueue_crd_migration_fails_while_the_cluster_runs_v1_3(running, status):
    # The task governance upgrade page: UpdateAddon from v1.3.x to v1.5 or later fails on the Kueue
    # CRDs' stored versions until they are migrated (the console's upgrade, or the page's steps).
    settings = validation.load_settings(patched_context("dev", {"addons": {"task_governance": {"version": "v1.6.0-eksbuild.1"}}}), "dev")[0]
    eks, ek = _client("eks")
    for addon in upgrade_plan.addons_of(settings):
        version = running if addon.name == upgrade_plan.TASK_GOVERNANCE else addon.pinned or "v1.0.0-eksbuild.1"
        ek.add_response("describe_addon", {"addon": {"addonName": addon.name, "clusterName": settings.eks_cluster_name,
                                                     "addonVersion": version}},
                        {"clusterName": settings.eks_cluster_name, "addonName": addon.name})
    ek.activate()
    aws = preflight.Clients(None, REGION, {"eks": eks, ("deployed", settings.hyperpod_cluster_name): {"ClusterName": "x"}})
    found = {r.check: r for r in preflight.check_drift_addons(settings, aws)}[f"drift add-on {upgrade_plan.TASK_GOVERNANCE}"]
    assert found.status == status
    if status == "fail":
        assert "v1.5.0-eksbuild.1" in found.detail and "HyperPod console" in found.action
        assert "task-governance-addon-migration-template.yaml" in found.action and "upgrade-plan" in found.action


def test_a_scaling_in_progress_is_one_handle_said_before_a_deploy_competes_with_it(results):
    op = results["drift operation op-0123456789"]
    assert op.status == "warn" and "a scaling in progress (system 1 -> 2)" in op.detail
    assert "describe-cluster-operation" in op.action and "--operation-id op-0123456789" in op.action


def test_the_states_read_are_the_apis():
    # botocore's sagemaker model: ClusterInstanceStatus has the moving states, ImageVersionStatus the four the drift says,
    # ClusterOperationType the two the operations line says.
    import botocore.session

    from infra.handlers import hyperpod_nodes

    model = botocore.session.get_session().get_service_model("sagemaker")
    assert set(hyperpod_nodes.MOVING) <= set(model.shape_for("ClusterInstanceStatus").enum)
    assert set(preflight.IMAGE_STATUS) == set(model.shape_for("ClusterSummary").members["ImageVersionStatus"].enum)
    assert set(model.shape_for("ClusterOperationSummary").members["Type"].enum) == {"Scaling", "DeepHealthCheck"}


def test_a_node_moving_between_groups_is_moving_not_failed():
    # MoveClusterNodes (botocore's sagemaker model): a node is DetachInProgress, then AttachInProgress; the groups'
    # counts change outside CloudFormation. The gate's wait and the drift both say it moves.
    from collections import Counter

    from infra.handlers import hyperpod_nodes

    settings = validation.load_settings(patched_context("dev", {"hyperpod": {"instance_groups": [
        {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}, {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1}]}}), "dev")[0]
    sagemaker, sm = _client("sagemaker")  # a node being moved into gpu: its target is 2 now, config says 1
    sm.add_response("describe_cluster", {"ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdef012345",
                                         "ClusterName": settings.hyperpod_cluster_name, "ClusterStatus": "InService",
                                         "InstanceGroups": [_group("system", "ml.m5.4xlarge", 1, 1, "UpToDate", "1.0.0"),
                                                            _group("gpu", "ml.g5.8xlarge", 1, 2, "UpToDate", "1.0.0")]})
    sm.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [_node("system", "ml.m5.4xlarge", 1),
                                                                   _node("gpu", "ml.g5.8xlarge", 1),
                                                                   _node("gpu", "ml.g5.8xlarge", 2, status="AttachInProgress")]})
    sm.activate()
    gpu = {r.check: r for r in preflight.check_drift_nodes(settings, preflight.Clients(None, REGION, {"sagemaker": sagemaker}))}["drift gpu nodes"]
    assert gpu.status == "warn" and "nodes are moving in or out (MoveClusterNodes)" in gpu.detail and "Failure" not in gpu.detail
    assert "1 AttachInProgress (moving: MoveClusterNodes)" in gpu.detail
    (line,) = hyperpod_nodes.shortfall({"gpu": 2}, {"gpu": Counter({"Running": 1, "DetachInProgress": 1})})
    assert line == "gpu has 1 of 2 Running (1 moving between groups (MoveClusterNodes: its counts change outside CloudFormation))"
