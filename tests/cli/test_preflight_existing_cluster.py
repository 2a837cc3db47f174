"""preflight with eks.existing_cluster: the cluster against HyperPod's EKS prerequisites (AWS
docs page sagemaker-hyperpod-eks-prerequisites: Kubernetes version, authentication mode API or
API_AND_CONFIG_MAP, VPC CNI 1.18.3 or later) and against what the deploy will create on it;
EKS answers from a botocore Stubber with the service model's response shapes."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from cli import preflight
from infra import config, validation
from tests.conftest import CAPABILITIES, patched_context

REGION = "us-east-1"
EXISTING = CAPABILITIES["existing-cluster"]
NAME = EXISTING["eks"]["existing_cluster"]["name"]
GROUP = EXISTING["eks"]["existing_cluster"]["security_group_id"]
VPC = EXISTING["network"]["existing_vpc"]["vpc_id"]
HYPERPOD_SUBNET = EXISTING["network"]["hyperpod_subnets"][0]["subnet_id"]
ADMIN = "arn:aws:iam::111111111111:role/Admin"


def _settings(eks: dict | None = None, **top):
    patch = config.deep_merge(EXISTING, {"eks": eks or {}, **top})
    return validation.load_settings(patched_context("dev", patch), "dev")[0]


CORE = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")
CERT_MANAGER = "v1.18.2-eksbuild.2"  # what the quick setup installs (cert-manager-template.yaml)


def _eks(settings, *, version="1.34", mode="API", vpc=VPC, group=GROUP, addons=(*CORE, "cert-manager"), running=None,
         cni="v1.19.2-eksbuild.1", cni_values='{"enableNetworkPolicy": "true"}', entries=(), found=True):
    """EKS's answers, in the order preflight asks: the cluster, its add-ons (the VPC CNI's
    version, then each add-on of the plan it has or config adopts), its access entries."""
    from addons import registry
    from addons.base import ManagedAddon

    running = {"cert-manager": CERT_MANAGER, **(running or {})}
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    if not found:
        stub.add_client_error("describe_cluster", "ResourceNotFoundException", "No cluster found", 404, expected_params={"name": NAME})
        stub.activate()
        return client
    stub.add_response("describe_cluster", {"cluster": {
        "name": NAME, "version": version, "status": "ACTIVE", "accessConfig": {"authenticationMode": mode},
        "resourcesVpcConfig": {"vpcId": vpc, "clusterSecurityGroupId": group, "subnetIds": ["subnet-0a1b2c3d4e5f60711"]},
    }}, {"name": NAME})
    stub.add_response("list_addons", {"addons": list(addons)}, {"clusterName": NAME})
    if "vpc-cni" in addons:
        addon = {"addonName": "vpc-cni", "clusterName": NAME, "addonVersion": cni, **({"configurationValues": cni_values} if cni_values else {})}
        stub.add_response("describe_addon", {"addon": addon},
                          {"clusterName": NAME, "addonName": "vpc-cni"})
    for addon in registry.plan(settings):
        if isinstance(addon, ManagedAddon) and addon.eks_name in addons:
            stub.add_response("describe_addon", {"addon": {"addonName": addon.eks_name, "clusterName": NAME, "status": "ACTIVE",
                                                           "addonVersion": running[addon.eks_name]}},
                              {"clusterName": NAME, "addonName": addon.eks_name})
    stub.add_response("list_access_entries", {"accessEntries": list(entries)}, {"clusterName": NAME})
    stub.activate()
    return client


def _cloudformation(*stacks):
    client = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_stacks", {"Stacks": list(stacks)}, {})
    stub.activate()
    return client


def _check(settings, cfn=None, **eks):
    clients = {"eks": _eks(settings, **eks), "cloudformation": cfn or _cloudformation()}
    results = preflight.check_existing_cluster(settings, preflight.Clients(None, REGION, clients))
    return {r.check: r for r in results}


def test_a_cluster_that_meets_every_prerequisite_passes_one_line_each():
    results = _check(_settings())
    assert {c: r.status for c, r in results.items()} == {
        "EKS cluster": "pass", "EKS cluster version": "pass", "EKS authentication mode": "pass", "VPC CNI": "pass",
        "VPC CNI network policy": "pass", "Pod Identity agent": "pass", "add-on cert-manager": "pass", "dependencies chart": "pass",
    }


def test_each_missing_prerequisite_is_one_line_that_says_what_to_do():
    s = _settings()
    results = _check(
        s, version="1.31", mode="CONFIG_MAP", vpc="vpc-0fffffffffffffff0", group="sg-0fffffffffffffff0",
        addons=("vpc-cni", "amazon-sagemaker-hyperpod-training-operator"), running={"amazon-sagemaker-hyperpod-training-operator": "v1.2.1-eksbuild.1"},
        cni="v1.18.1-eksbuild.3", cni_values=None, entries=(ADMIN,),
    )
    failed = {c for c, r in results.items() if r.status == "fail"}
    assert failed == {
        "EKS cluster version", "EKS authentication mode", "EKS cluster VPC", "EKS cluster security group", "VPC CNI", "VPC CNI network policy",
        "Pod Identity agent", "add-on cert-manager", "add-on amazon-sagemaker-hyperpod-training-operator", "access entry Admin",
    }
    for check in failed:
        assert results[check].action and "\n" not in results[check].detail + results[check].action
    assert "set eks.version to \"1.31\"" in results["EKS cluster version"].action
    assert "authenticationMode=API_AND_CONFIG_MAP" in results["EKS authentication mode"].action
    assert "1.18.3" in results["VPC CNI"].detail
    assert "install_pod_identity_agent true" in results["Pod Identity agent"].action
    # Adopted but absent, and present but not adopted: each says what config should say.
    assert "addons.cert_manager.existing false" in results["add-on cert-manager"].action
    assert results["add-on amazon-sagemaker-hyperpod-training-operator"].action == "set addons.training_operator.existing: true to use it"


def test_a_version_config_and_cluster_agree_on_is_still_held_to_hyperpods_range():
    (version,) = [r for c, r in _check(_settings({"version": "1.35"}), version="1.35").items() if c == "EKS cluster version"]
    assert version.status == "fail" and "1.28-1.34" in version.detail


def test_a_self_managed_cni_is_a_warning_naming_the_command_that_shows_its_image():
    results = _check(_settings(), addons=("eks-pod-identity-agent", "cert-manager"))
    assert results["VPC CNI"].status == "warn" and "aws-node" in results["VPC CNI"].action
    assert results["VPC CNI network policy"].status == "warn" and "--enable-network-policy=true" in results["VPC CNI network policy"].detail


@pytest.mark.parametrize("values", ['{"enableNetworkPolicy": "false"}', '{"enableNetworkPolicy": true}', "{}", "enableNetworkPolicy: true"])
def test_the_clusters_own_cni_must_run_its_network_policy_agent(values):
    # EKS user guide, "Restrict Pod network traffic with Kubernetes network policies": the
    # add-on's configuration value enableNetworkPolicy, the string "true". This project does
    # not change the VPC CNI of a cluster it did not create, so preflight says what to run.
    policy = _check(_settings(), cni_values=values)["VPC CNI network policy"]
    assert policy.status == "fail" and "--configuration-values '{\"enableNetworkPolicy\": \"true\"}'" in policy.action
    # The same value written as YAML, which EKS also takes, passes.
    assert _check(_settings(), cni_values='enableNetworkPolicy: "true"')["VPC CNI network policy"].status == "pass"


def test_an_agent_to_install_must_not_be_there_yet_and_a_kubectl_role_needs_its_entry():
    role = "arn:aws:iam::111111111111:role/platform-kubectl"
    s = _settings({"existing_cluster": {"install_pod_identity_agent": True, "kubectl_role_arn": role}})
    results = _check(s)
    assert results["Pod Identity agent"].status == "fail" and "install_pod_identity_agent false" in results["Pod Identity agent"].action
    assert results["kubectl role"].status == "fail" and "create-access-entry" in results["kubectl role"].action
    fine = _check(s, addons=("vpc-cni", "cert-manager"), entries=(role,))
    assert fine["Pod Identity agent"].status == "pass" and "kubectl role" not in fine


def test_no_such_cluster_is_one_failure():
    results = preflight.check_existing_cluster(_settings(), preflight.Clients(None, REGION, {"eks": _eks(_settings(), found=False)}))
    assert [(r.check, r.status) for r in results] == [("EKS cluster", "fail")]


# ------------------------------------------------------------------ a cluster the quick setup built
# aws/sagemaker-hyperpod-cluster-setup, eks/cloudformation (file index, 2026-12): eks-template.yaml
# (Kubernetes 1.34, API_AND_CONFIG_MAP, the four core add-ons), cert-manager-template.yaml
# (cert-manager v1.18.2-eksbuild.2 and an admin access entry for its Lambda), helm-chart-template.yaml
# (the dependencies chart as release "dependencies" in kube-system, an admin access entry for its
# Lambda, output HelmChartDeploymentComplete), and the training operator and task governance the
# main stack may add; the console user who created it has an access entry of its own.
QUICK_SETUP_ADDONS = (*CORE, "cert-manager", "amazon-sagemaker-hyperpod-taskgovernance", "amazon-sagemaker-hyperpod-training-operator")
QUICK_SETUP_RUNNING = {"amazon-sagemaker-hyperpod-taskgovernance": "v1.3.1-eksbuild.1", "amazon-sagemaker-hyperpod-training-operator": "v1.2.1-eksbuild.1"}
QUICK_SETUP_ENTRIES = (ADMIN, "arn:aws:iam::111111111111:role/sagemaker-hyperpod-eks-HelmCustomResourceRole-1A2B3C",
                       "arn:aws:iam::111111111111:role/sagemaker-hyperpod-eks-CertManagerCustomResourceRole-4D5E6F")


def _quick_setup_chart_stack():
    import datetime

    return {
        "StackName": "hyperpod-quick-setup-HelmChartStack-7G8H9I", "StackStatus": "CREATE_COMPLETE",
        "CreationTime": datetime.datetime(2026, 10, 1, tzinfo=datetime.timezone.utc),
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in
                       (("EKSClusterName", NAME), ("HelmRelease", "dependencies"), ("Namespace", "kube-system"),
                        ("HelmRepoPath", "helm_chart/HyperPodHelmChart"))],
        "Outputs": [{"OutputKey": "HelmChartDeploymentComplete", "OutputValue": "HelmChartDeploymentComplete"}],
    }


def _quick_setup(settings, **overrides):
    return _check(settings, _cloudformation(_quick_setup_chart_stack()), **{
        "mode": "API_AND_CONFIG_MAP", "addons": QUICK_SETUP_ADDONS, "running": QUICK_SETUP_RUNNING, "cni": "v1.20.1-eksbuild.3",
        "entries": QUICK_SETUP_ENTRIES, **overrides})


def test_on_a_quick_setup_cluster_preflight_says_in_one_line_per_add_on_what_config_should_say():
    results = _quick_setup(_settings())
    failed = {c: r for c, r in results.items() if r.status == "fail"}
    assert set(failed) == {"add-on amazon-sagemaker-hyperpod-taskgovernance", "add-on amazon-sagemaker-hyperpod-training-operator",
                           "access entry Admin", "dependencies chart"}
    assert failed["add-on amazon-sagemaker-hyperpod-taskgovernance"].action == "set addons.task_governance.existing: true to use it"
    assert "(v1.3.1-eksbuild.1)" in failed["add-on amazon-sagemaker-hyperpod-taskgovernance"].detail
    assert failed["dependencies chart"].action.startswith('set hyperpod.helm_chart.release to "dependencies"')
    assert results["add-on cert-manager"].status == "pass" and CERT_MANAGER in results["add-on cert-manager"].detail
    # Config that says what preflight said validates and passes on the same account; the chart is
    # upgraded in place, which preflight says in a warning with what destroying it then takes away.
    adopted = _settings({"admin_principal_arns": []}, addons={"cert_manager": {"existing": True}, "task_governance": {"existing": True},
                                                             "training_operator": {"existing": True}},
                        hyperpod={"helm_chart": {"release": "dependencies"}})
    again = _quick_setup(adopted)
    assert {c: r.status for c, r in again.items() if r.status != "pass"} == {"dependencies chart": "warn"}
    assert "needs v1.3.0-eksbuild.1 or newer" in again["add-on amazon-sagemaker-hyperpod-taskgovernance"].detail


def test_an_adopted_add_on_older_than_what_depends_on_it_fails_naming_the_migration_where_it_crosses_it():
    adopted = _settings(addons={"task_governance": {"existing": True}, "training_operator": {"existing": True}})
    results = _quick_setup(adopted, running={**QUICK_SETUP_RUNNING, "amazon-sagemaker-hyperpod-taskgovernance": "v1.2.2-eksbuild.1"})
    tg = results["add-on amazon-sagemaker-hyperpod-taskgovernance"]
    # The training operator's troubleshooting page: it "works only with version v1.3.0-eksbuild.1 or higher".
    assert tg.status == "fail" and "older than v1.3.0-eksbuild.1, which the training operator needs" in tg.detail
    assert "update-addon" in tg.action and "task-governance-addon-migration-template.yaml" in tg.action


def test_an_adopted_add_on_the_cluster_lacks_fails_and_existing_needs_an_existing_cluster():
    adopted = _settings(addons={"observability": {"existing": True}})
    results = _quick_setup(adopted)
    assert results["add-on amazon-sagemaker-hyperpod-observability"].status == "fail"
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", {"addons": {"cert_manager": {"existing": True}}}), "dev")
    assert err.value.problems == ["dev: addons.cert_manager.existing: True applies only with eks.existing_cluster: a cluster this "
                                  "project creates runs none of its own add-ons"]


def _subnets(free: int):
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_subnets", {"Subnets": [{"SubnetId": HYPERPOD_SUBNET, "AvailableIpAddressCount": free}]},
                      {"SubnetIds": [HYPERPOD_SUBNET]})
    stub.activate()
    return client


def test_a_hyperpod_subnet_needs_an_address_per_node_and_should_have_one_per_pod():
    s = _settings()  # dev: one m5.4xlarge (16 vCPUs: 110 pods) and one g5.8xlarge (32 vCPUs: 250 pods)
    by_free = {free: preflight.check_existing_subnets(s, preflight.Clients(None, REGION, {"ec2": _subnets(free)}))[0]
               for free in (1, 300, 362)}
    assert by_free[1].status == "fail" and "1 free addresses for 2 nodes" in by_free[1].detail
    assert by_free[300].status == "warn" and "need 362" in by_free[300].detail
    assert by_free[362].status == "pass"


def test_what_a_new_cluster_would_check_or_keep_is_left_out():
    s = _settings()
    assert preflight.check_eks_name(s, preflight.Clients(None, REGION, {})) == []
    assert "vpc-cni" not in preflight.account._addons_to_create(s) and "eks-pod-identity-agent" not in preflight.account._addons_to_create(s)
    assert not [n for kind, n, _ in preflight.retained_names(s) if n.startswith("/aws/eks/")]
    assert preflight.check_existing_cluster(validation.load_settings(patched_context("dev", {}), "dev")[0], None) == []
    # No admins to add is no warning here: the cluster's access stays as it is.
    (admins,) = preflight.check_admins(_settings({"admin_principal_arns": []}), preflight.Clients(None, REGION, {"iam": object()}))
    assert admins.status == "pass"


def _group(*, ingress=(), egress=(), vpc=VPC):
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_security_groups", {"SecurityGroups": [{
        "GroupId": GROUP, "GroupName": "eks-cluster-sg-platform-shared", "VpcId": vpc, "OwnerId": "111111111111", "Description": "EKS",
        "IpPermissions": list(ingress), "IpPermissionsEgress": list(egress)}]}, {"GroupIds": [GROUP]})
    stub.activate()
    return client


SELF = {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": GROUP}]}
ANYWHERE = {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}


def test_a_group_of_its_own_must_admit_itself_both_ways_and_send_anywhere():
    """The rules the network stack gives a group it creates, as both references do (quick setup
    security-group-template; awsome security_group module): self in and out, all egress."""
    s = _settings(network={"existing_security_group_id": GROUP})

    def run(ec2):
        return {r.check.removeprefix(f"security group {GROUP} "): r for r in preflight.check_existing_security_group(s, preflight.Clients(None, REGION, {"ec2": ec2}))}

    assert {k: r.status for k, r in run(_group(ingress=[SELF], egress=[SELF, ANYWHERE])).items()} == {
        "all traffic from itself": "pass", "all traffic to itself (EFA)": "pass", "all egress": "pass"}
    # EKS's default cluster group: self ingress and all egress, but no egress rule naming itself.
    default = run(_group(ingress=[SELF], egress=[ANYWHERE]))
    assert default["all traffic to itself (EFA)"].status == "fail"
    assert "authorize-security-group-egress" in default["all traffic to itself (EFA)"].action
    (elsewhere,) = run(_group(vpc="vpc-0fffffffffffffff0")).values()
    assert elsewhere.status == "fail" and VPC in elsewhere.detail


def test_an_existing_lifecycle_bucket_must_be_here_and_under_a_key_the_stacks_can_use(monkeypatch):
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s = _settings(hyperpod={"existing_lifecycle_bucket": "platform-lifecycle"})
    with mock_aws():
        aws = preflight.Clients(boto3.Session(region_name=REGION), REGION)
        (missing,) = preflight.check_existing_lifecycle_bucket(s, aws)
        assert missing.status == "fail" and "hyperpod.existing_lifecycle_bucket" in missing.action
        aws("s3").create_bucket(Bucket="platform-lifecycle")
        (plain,) = preflight.check_existing_lifecycle_bucket(s, aws)
        assert plain.status == "pass"
        aws("s3").put_bucket_encryption(Bucket="platform-lifecycle", ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "arn:aws:kms:us-east-1:111111111111:key/k"}}]})
        (customer_key,) = preflight.check_existing_lifecycle_bucket(s, aws)
        assert customer_key.status == "fail" and "customer managed key" in customer_key.detail
        # Not ours to keep: no "name is free" check of it after a teardown.
        assert "platform-lifecycle" not in [n for _, n, _ in preflight.retained_names(s)]
        elsewhere = _settings(hyperpod={"existing_lifecycle_bucket": "platform-lifecycle-eu"})
        aws("s3").create_bucket(Bucket="platform-lifecycle-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        (far,) = preflight.check_existing_lifecycle_bucket(elsewhere, aws)
        assert far.status == "fail" and "eu-west-1" in far.detail


def test_an_existing_execution_role_is_read_by_its_name_without_the_path_and_simulated_against_the_stacks_grants():
    import json

    arn = "arn:aws:iam::111111111111:role/service-role/nodes"
    s = _settings(hyperpod={"existing_lifecycle_bucket": "platform-lifecycle", "existing_execution_role_arn": arn})
    client = boto3.client("iam", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    trust = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    stub.add_response("get_role", {"Role": {"Path": "/service-role/", "RoleName": "nodes", "RoleId": "AROAEXAMPLEEXAMPLE01", "Arn": arn,
                                            "CreateDate": "2026-01-01T00:00:00Z", "AssumeRolePolicyDocument": json.dumps(trust)}}, {"RoleName": "nodes"})
    stub.add_response("list_attached_role_policies", {"AttachedPolicies": []}, {"RoleName": "nodes"})
    needs = preflight.resources._execution_role_needs(s, preflight.Clients(None, REGION))
    for what, actions, resource in needs:
        decision = "implicitDeny" if what == "Pod Identity" else "allowed"
        stub.add_response("simulate_principal_policy", {"EvaluationResults": [
            {"EvalActionName": a, "EvalResourceName": resource, "EvalDecision": decision} for a in actions]})
    stub.activate()
    results = {r.check: r for r in preflight.check_existing_execution_role(s, preflight.Clients(None, REGION, {"iam": client}))}
    assert results["execution role trust"].status == "fail"
    assert results["execution role managed policy"].status == "fail" and "--role-name nodes" in results["execution role managed policy"].action
    assert results["execution role: Pod Identity"].status == "fail"
    assert results["execution role: lifecycle scripts"].status == "pass"
    assert "arn:aws:s3:::platform-lifecycle/lifecycle/" in results["execution role: lifecycle scripts"].detail


def test_an_entry_the_cluster_has_is_found_whatever_the_case_or_path_it_was_made_with():
    # EKS keeps one access entry per principal; IAM names a role without case and whatever its
    # path (infra/identity.py): the entry made as role/ops/ADMIN is the admin's, and a team's
    # principal that has one fails too.
    team = {"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
            "principals": ["arn:aws:iam::111111111111:role/scientists"]}
    role = "arn:aws:iam::111111111111:role/path/platform-kubectl"
    s = _settings({"existing_cluster": {"kubectl_role_arn": role}}, governance={"teams": [team]})
    results = _check(s, entries=("arn:aws:iam::111111111111:role/ops/ADMIN", "arn:aws:iam::111111111111:role/Scientists",
                                 "arn:aws:iam::111111111111:role/Platform-Kubectl"))
    assert results["access entry Admin"].status == "fail" and "role/ops/ADMIN" in results["access entry Admin"].detail
    assert results["access entry scientists"].action == "leave it out of governance.teams[0].principals (it has access already)"
    assert "kubectl role" not in results


def test_the_self_managed_cni_commands_print_its_image_and_its_agents_flag_through_kubectl(tmp_path):
    # The two commands preflight names, run as a user would by Debian's kubectl against an aws-node
    # DaemonSet in the shape amazon-vpc-cni-k8s's manifest gives it (containers aws-node and
    # aws-eks-nodeagent, the agent's --enable-network-policy flag; an aws-vpc-cni-init init container).
    import shlex

    from tests.kubectl_engine import ApiServer

    results = _check(_settings(), addons=("eks-pod-identity-agent", "cert-manager"))
    registry = "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni"
    pod = {"initContainers": [{"name": "aws-vpc-cni-init", "image": f"{registry}-init:v1.21.1"}],
           "containers": [{"name": "aws-node", "image": f"{registry}:v1.21.1"},
                          {"name": "aws-eks-nodeagent", "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon/aws-network-policy-agent:v1.2.0",
                           "args": ["--enable-ipv6=false", "--enable-network-policy=true"]}]}
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "aws-node", "namespace": "kube-system"},
                 "spec": {"selector": {"matchLabels": {"k8s-app": "aws-node"}}, "template": {"spec": pod}}}
    with ApiServer([daemonset], tmp_path) as server:
        printed = {}
        for check in ("VPC CNI", "VPC CNI network policy"):
            command = shlex.split(results[check].action)
            assert command[0] == "kubectl"
            result = server.kubectl(*command[1:])
            assert result.returncode == 0, result.stderr
            printed[check] = result.stdout
    assert f"{registry}:v1.21.1" in printed["VPC CNI"].split()
    assert "--enable-network-policy=true" in printed["VPC CNI network policy"]
