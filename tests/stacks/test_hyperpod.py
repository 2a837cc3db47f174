"""HyperPod stack: lifecycle scripts, execution role, dependencies chart, the cluster."""

from __future__ import annotations

import fnmatch
import json
import shutil

import pytest
from aws_cdk.assertions import Match

from stacks import lifecycle as lifecycle_module
from tests.conftest import ENVIRONMENTS


def _cluster(s) -> dict:
    (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    return cluster


def _groups(s) -> dict:
    return {g["InstanceGroupName"]: g for g in _cluster(s)["Properties"]["InstanceGroups"]}


def _logical_id(s, suffix, type_, prefix):
    (lid,) = [k for k, r in s.templates[suffix]["Resources"].items() if r["Type"] == type_ and k.startswith(prefix)]
    return lid


# ---------------------------------------------------------------- lifecycle scripts


def test_lifecycle_bucket_is_kms_encrypted_ssl_only_versioned_and_access_logged(synth):
    s = synth("dev")
    t = s.template("cluster")
    bucket_id = _logical_id(s, "cluster", "AWS::S3::Bucket", "LifecycleBucket")
    props = s.templates["cluster"]["Resources"][bucket_id]["Properties"]
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert sse["SSEAlgorithm"] == "aws:kms" and "KMSMasterKeyID" in sse
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert "DestinationBucketName" in props["LoggingConfiguration"]
    assert props["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True
    # HyperPod accepts lifecycle scripts only from buckets named sagemaker-*.
    assert props["BucketName"] == "sagemaker-hyperpod-dev-lc-111111111111-us-east-1"
    t.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            },
        },
    )


def test_instance_groups_run_our_on_create_script_from_a_content_versioned_prefix(synth):
    s = synth("dev")
    digest = lifecycle_module.scripts_digest()
    for group in _groups(s).values():
        lifecycle = group["LifeCycleConfig"]
        assert lifecycle["OnCreate"] == "on_create.sh"
        assert f"/lifecycle/{digest}/" in json.dumps(lifecycle["SourceS3Uri"])
    deployment = s.resources("cluster", "Custom::CDKBucketDeployment")
    (props,) = [d["Properties"] for d in deployment.values()]
    assert props["DestinationBucketKeyPrefix"] == f"lifecycle/{digest}/"
    assert props["Prune"] is False


def test_changing_a_script_changes_its_version_prefix(tmp_path):
    copy = tmp_path / "scripts"
    shutil.copytree(lifecycle_module.LIFECYCLE_SCRIPTS, copy)
    before = lifecycle_module.scripts_digest(copy)
    (copy / "on_create.sh").write_text((copy / "on_create.sh").read_text() + "\n# changed\n")
    assert lifecycle_module.scripts_digest(copy) != before


# ---------------------------------------------------------------- execution role


def _execution_statements(s) -> list[dict]:
    policies = s.resources("hyperpod", "AWS::IAM::ManagedPolicy")
    (policy,) = [p for k, p in policies.items() if k.startswith("ExecutionPolicy")]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_execution_role_trusts_sagemaker_and_carries_the_cluster_instance_policy(synth):
    s = synth("dev")
    s.template("hyperpod").has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"})]
            },
            "ManagedPolicyArns": [Match.object_like({"Fn::Join": Match.array_with([Match.array_with([
                ":iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy"])])})],
        },
    )


def _resolve(s, value, stack="hyperpod") -> str:
    """A policy Resource as text: pseudo parameters filled in, Refs and attributes as
    ${LogicalId} / ${LogicalId.Attr}, and imports followed to the producing stack's resource."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [_resolve(s, v, stack) for v in value]
    (fn, arg), = value.items()
    pseudo = {"AWS::Partition": "aws", "AWS::Region": s.settings.region, "AWS::AccountId": s.settings.account}
    if fn == "Ref":
        return pseudo.get(arg, "${%s}" % arg)
    if fn == "Fn::GetAtt":
        return "${%s.%s}" % tuple(arg)
    if fn == "Fn::Join":
        return arg[0].join(_resolve(s, part, stack) for part in arg[1])
    if fn == "Fn::ImportValue":
        producer, exported = s.exported(arg)
        return _resolve(s, exported, producer)
    raise AssertionError(f"cannot resolve {value}")


def _allowed(statements, action: str, resource: str) -> bool:
    for st in statements:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if st["Effect"] == "Allow" and any(fnmatch.fnmatchcase(action, a) for a in actions) and any(
            fnmatch.fnmatchcase(resource, r) for r in resources
        ):
            return True
    return False


def _lid(s, suffix, type_, prefix) -> str:
    (lid,) = [k for k, r in s.templates[suffix]["Resources"].items() if r["Type"] == type_ and k.startswith(prefix)]
    return lid


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_execution_role_allows_every_action_the_reference_templates_grant(synth, env):
    # FACTS "Instance-group execution role", from the quick setup's sagemaker-iam-role-template.yaml
    # and awsome's sagemaker-iam-role-stack.yaml. Resources are this environment's real ones.
    s = synth(env)
    statements = [
        {**st, "Resource": _resolve(s, st["Resource"])} for st in _execution_statements(s)
    ]
    ec2 = f"arn:aws:ec2:{s.settings.region}:{s.settings.account}"
    vpc = "${%s}" % _lid(s, "network", "AWS::EC2::VPC", "Vpc")
    subnets = ["${%s}" % k for k, r in s.templates["network"]["Resources"].items() if r["Type"] == "AWS::EC2::Subnet" and k.startswith("HyperPodSubnet")]
    group = "${%s.GroupId}" % _lid(s, "network", "AWS::EC2::SecurityGroup", "EfaSecurityGroup")
    placed = [f"{ec2}:network-interface/eni-0123456789abcdef0", f"{ec2}:instance/i-0123456789abcdef0", f"{ec2}:vpc/{vpc}",
              *(f"{ec2}:subnet/{sn}" for sn in subnets), f"{ec2}:security-group/{group}"]
    assert subnets
    (lifecycle_bucket,) = [r["Properties"]["BucketName"] for r in s.resources("cluster", "AWS::S3::Bucket").values()
                           if "BucketName" in r["Properties"]]
    # Images of the EKS add-ons (602401143452 serves us-east-1) and of the HyperPod health agent (767398015722).
    aws_owned = [f"arn:aws:ecr:{s.settings.region}:602401143452:repository/amazon-k8s-cni",
                 f"arn:aws:ecr:{s.settings.region}:767398015722:repository/hyperpod-health-monitoring-agent"]
    table = [
        *[(f"ecr:{a}", repo) for a in ("BatchCheckLayerAvailability", "BatchGetImage", "GetDownloadUrlForLayer") for repo in aws_owned],
        ("ecr:GetAuthorizationToken", "*"),
        *[(f"ec2:{a}", r) for a in ("AssignPrivateIpAddresses", "CreateNetworkInterface", "CreateNetworkInterfacePermission",
                                    "DeleteNetworkInterface", "DeleteNetworkInterfacePermission", "DetachNetworkInterface",
                                    "ModifyNetworkInterfaceAttribute", "UnassignPrivateIpAddresses") for r in placed],
        *[(f"ec2:{a}", "*") for a in ("DescribeVpcs", "DescribeDhcpOptions", "DescribeSecurityGroups", "DescribeSubnets",
                                      "DescribeNetworkInterfaces", "DescribeInstances", "DescribeInstanceTypes", "DescribeTags")],
        ("ec2:CreateTags", f"{ec2}:network-interface/eni-0123456789abcdef0"),
        ("eks-auth:AssumeRoleForPodIdentity", "${%s.Arn}" % _lid(s, "cluster", "AWS::EKS::Cluster", "Cluster")),
        ("cloudwatch:DescribeAlarms", "*"),
        ("s3:GetObject", f"arn:aws:s3:::{lifecycle_bucket}/lifecycle/{lifecycle_module.scripts_digest()}/on_create.sh"),
        ("kms:Decrypt", "${%s.Arn}" % _lid(s, "cluster", "AWS::KMS::Key", "DataKey")),
    ]
    denied = [(a, r) for a, r in table if not _allowed(statements, a, r)]
    assert denied == []


def test_mutating_network_actions_are_scoped_to_our_vpc_subnets_and_group(synth):
    s = synth("dev")
    statements = [{**st, "Resource": _resolve(s, st["Resource"])} for st in _execution_statements(s)]
    ec2 = f"arn:aws:ec2:{s.settings.region}:{s.settings.account}"
    for foreign in (f"{ec2}:vpc/vpc-0ffffffffffffffff", f"{ec2}:subnet/subnet-0ffffffffffffffff", f"{ec2}:security-group/sg-0ffffffffffffffff"):
        assert not _allowed(statements, "ec2:CreateNetworkInterface", foreign)


def test_wildcard_resources_are_only_on_actions_without_resource_scoping(synth):
    # ECR pulls are on * because the images live in AWS-owned accounts' repositories.
    unscoped = ("ec2:Describe", "ecr:", "cloudwatch:DescribeAlarms")
    for st in _execution_statements(synth("dev")):
        if st["Resource"] == "*":
            acts = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            assert all(a.startswith(unscoped) for a in acts), acts


def test_pod_identity_is_scoped_to_this_eks_cluster(synth):
    (st,) = [st for st in _execution_statements(synth("dev")) if st["Action"] == "eks-auth:AssumeRoleForPodIdentity"]
    assert "Fn::ImportValue" in st["Resource"] and "Cluster" in json.dumps(st["Resource"])


# ---------------------------------------------------------------- dependencies chart


def _chart(s) -> dict:
    (chart,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
    return chart


def test_dependencies_chart_goes_into_kube_system_with_device_plugins_on_and_cert_manager_off(synth):
    props = _chart(synth("dev"))["Properties"]
    assert props["Namespace"] == "kube-system"
    values = json.loads(props["Values"]) if isinstance(props["Values"], str) else props["Values"]
    assert values["cert-manager"]["enabled"] is False
    assert values["nvidia-device-plugin"]["devicePlugin"]["enabled"] is True
    assert values["aws-efa-k8s-device-plugin"]["devicePlugin"]["enabled"] is True
    assert values["health-monitoring-agent"]["enabled"] is True
    assert values["deep-health-check"]["enabled"] is True
    assert values["job-auto-restart"]["enabled"] is True


def test_hyperpod_cluster_is_created_after_the_chart_and_the_scripts(synth):
    # FACTS: the chart goes into kube-system before the HyperPod cluster is created. Both are
    # in the cluster stack, which the hyperpod stack waits for as a whole.
    s = synth("dev")
    assert _logical_id(s, "cluster", "Custom::AWSCDK-EKS-HelmChart", "DependenciesChart")
    assert _logical_id(s, "cluster", "Custom::CDKBucketDeployment", "LifecycleScripts")
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    assert "hyperpod-dev-cluster" in manifest["artifacts"]["hyperpod-dev-hyperpod"]["dependencies"]


def test_chart_values_from_config_are_merged_over_ours(synth):
    s = synth("dev", {"hyperpod": {"helm_chart": {"values": {"mpi-operator": {"enabled": False}}}}})
    values = _chart(s)["Properties"]["Values"]
    values = json.loads(values) if isinstance(values, str) else values
    assert values["mpi-operator"] == {"enabled": False} and values["cert-manager"]["enabled"] is False


# ---------------------------------------------------------------- the cluster


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cluster_is_orchestrated_by_the_eks_cluster_in_the_hyperpod_subnet(synth, env):
    props = _cluster(synth(env))["Properties"]
    assert "Cluster" in json.dumps(props["Orchestrator"]["Eks"]["ClusterArn"])
    assert props["NodeRecovery"] == "Automatic"
    assert "HyperPodSubnet" in json.dumps(props["VpcConfig"]["Subnets"])
    assert "EfaSecurityGroup" in json.dumps(props["VpcConfig"]["SecurityGroupIds"])
    assert props["ClusterName"] == f"hyperpod-{env}-hp"


def test_prod_uses_continuous_provisioning_dev_does_not(synth):
    assert _cluster(synth("prod"))["Properties"]["NodeProvisioningMode"] == "Continuous"
    assert "NodeProvisioningMode" not in _cluster(synth("dev"))["Properties"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_instance_groups_come_from_config(synth, env):
    s = synth(env)
    groups = _groups(s)
    assert list(groups) == [g.name for g in s.settings.hyperpod.instance_groups]
    for g in s.settings.hyperpod.instance_groups:
        props = groups[g.name]
        assert props["InstanceType"] == g.instance_type
        assert props["InstanceCount"] == g.count
        assert props["ThreadsPerCore"] == g.threads_per_core
        volumes = [c["EbsVolumeConfig"] for c in props["InstanceStorageConfigs"]]
        assert {"VolumeSizeInGB": g.ebs_volume_gb} == {k: v for k, v in volumes[-1].items() if k != "VolumeKmsKeyId"}
        # Under the group's own customer managed key where config asks (prod), root volume included.
        encrypted = s.settings.hyperpod.volume_encryption is not None
        assert all(("VolumeKmsKeyId" in v) == encrypted for v in volumes) and len(volumes) == 1 + encrypted


def test_every_default_environment_has_a_4xlarge_or_larger_system_group(synth):
    for env in ENVIRONMENTS:
        s = synth(env)
        assert any(not g.spec.is_accelerated and g.spec.vcpus >= 16 for g in s.settings.hyperpod.instance_groups)


def test_deep_health_checks_are_on_for_p5_and_off_where_unsupported(synth):
    prod = _groups(synth("prod"))
    assert prod["gpu"]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert "OnStartDeepHealthChecks" not in prod["system"]
    assert "OnStartDeepHealthChecks" not in _groups(synth("dev"))["gpu"]  # g5 does not support them


EXTRA_GROUP = {
    "network": {
        "hyperpod_subnets": [
            {"availability_zone": "us-east-1a", "cidr": "10.1.0.0/17"},
            {"availability_zone": "us-east-1b", "cidr": "10.1.128.0/17"},
        ]
    },
    "hyperpod": {
        "instance_groups": [
            {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
            {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1},
            {
                "name": "reserved",
                "instance_type": "ml.p5.48xlarge",
                "count": 2,
                "labels": {"team": "research"},
                "taints": [{"key": "dedicated", "value": "research", "effect": "NoSchedule"}],
                "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-weekly",
                "availability_zone": "us-east-1b",
            },
        ]
    },
}


def test_labels_taints_training_plan_and_zone_override_come_from_config(synth):
    s = synth("dev", EXTRA_GROUP)
    reserved = _groups(s)["reserved"]
    assert reserved["KubernetesConfig"] == {
        "Labels": {"team": "research"},
        "Taints": [{"Key": "dedicated", "Value": "research", "Effect": "NoSchedule"}],
    }
    assert reserved["TrainingPlanArn"].endswith("training-plan/p5-weekly")
    assert "us-east-1b" in json.dumps(reserved["OverrideVpcConfig"]["Subnets"]).replace("useast1b", "us-east-1b")
    assert "OverrideVpcConfig" not in _groups(s)["gpu"]


def test_outputs_give_names_arn_and_the_kubeconfig_command(synth):
    outputs = synth("dev").templates["hyperpod"]["Outputs"]
    assert outputs["HyperPodClusterName"]["Value"] == "hyperpod-dev-hp"
    assert "Fn::GetAtt" in outputs["HyperPodClusterArn"]["Value"]
    assert outputs["EksClusterName"]["Value"] == "hyperpod-dev"
    assert outputs["UpdateKubeconfigCommand"]["Value"] == "aws eks update-kubeconfig --region us-east-1 --name hyperpod-dev"


def test_a_prepared_chart_is_installed_from_its_folder(tmp_path, monkeypatch):
    from infra import chart
    from tests.conftest import CONTEXT, _synthesize

    revision = CONTEXT["defaults"]["hyperpod"]["helm_chart"]["revision"]
    prepared = chart.prepared_dir(revision, tmp_path / "build")
    prepared.mkdir(parents=True)
    (prepared / "Chart.yaml").write_text("apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n")
    (prepared / chart.MARKER).write_text("{}")
    monkeypatch.setattr(chart, "PREPARED_ROOT", tmp_path / "build")
    s = _synthesize(CONTEXT, "dev", tmp_path / "out")
    assets = json.loads((s.outdir / "hyperpod-dev-cluster.assets.json").read_text())["files"]
    sources = [a["source"]["path"] for a in assets.values()]
    staged = [p for p in sources if (s.outdir / p / "Chart.yaml").is_file()]
    assert len(staged) == 1  # the prepared chart itself, not the stand-in folder
    assert not any((s.outdir / p / "README.md").is_file() for p in sources)


# ------------------------------------------------------------------ the gates follow the nodes


def test_every_instance_group_property_either_rolls_the_nodes_or_keeps_them():
    # AWS::SageMaker::Cluster's instance group (cfn-lint's schema): each property is classified,
    # once, with why (stacks/hyperpod.py ROLLS_NODES, KEEPS_NODES).
    from infra import cfn_schema
    from stacks import hyperpod

    schema = cfn_schema.resource("AWS::SageMaker::Cluster")
    read_only = {p.split("/")[-1] for p in schema["readOnlyProperties"]}  # CurrentCount: HyperPod reports it
    group = set(schema["definitions"]["ClusterInstanceGroup"]["properties"]) - read_only
    assert not set(hyperpod.ROLLS_NODES) & set(hyperpod.KEEPS_NODES)
    assert set(hyperpod.ROLLS_NODES) | set(hyperpod.KEEPS_NODES) == group, group ^ (set(hyperpod.ROLLS_NODES) | set(hyperpod.KEEPS_NODES))


@pytest.mark.parametrize("name", ["dev", "prod", "cluster-options", "karpenter"])
def test_the_gates_carry_every_property_of_their_groups_that_rolls_the_nodes(synth, name):
    # The node and accelerator gates carry, per group, each rolling property exactly as the
    # cluster is given it (tokens and all): CloudFormation updates a custom resource whose
    # properties changed, so any change to one of them (an AMI release, the lifecycle script's
    # prefix, deep health checks, the type, the volumes, ...) makes both gates wait again after
    # the cluster's update, counts unchanged.
    from stacks import hyperpod

    s = synth(name)
    (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    groups = {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}
    gates = [r["Properties"] for t in ("Custom::HyperPodNodesReady", "Custom::HyperPodAcceleratorsReady")
             for r in s.resources("hyperpod", t).values()]
    assert gates
    for gate in gates:
        waited = set(gate.get("InstanceGroups") or gate["Groups"])
        assert set(gate["NodeSpecs"]) == waited
        for group in waited:
            assert gate["NodeSpecs"][group] == {k: v for k, v in groups[group].items() if k in hyperpod.ROLLS_NODES}


def test_every_rolling_property_reaches_a_gate_in_some_config(synth):
    # Seen wired, not only absent on both sides: across the environments and the capability that
    # sets every cluster option, each rolling property is in some gate's NodeSpecs.
    from stacks import hyperpod

    seen = set()
    for name in ("dev", "prod", "cluster-options"):
        for r in synth(name).resources("hyperpod", "Custom::HyperPodNodesReady").values():
            seen |= {k for spec in r["Properties"]["NodeSpecs"].values() for k in spec}
    assert seen == set(hyperpod.ROLLS_NODES), set(hyperpod.ROLLS_NODES) - seen
