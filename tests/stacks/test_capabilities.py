"""The capabilities no environment turns on by default (tests/conftest.py CAPABILITIES), each
in a config of its own: what a reviewer checks in each, against the AWS docs and schemas."""

from __future__ import annotations

import json

import pytest

from infra import cfn_schema, config, validation
from manifests import autoscaling
from manifests import job as job_manifest
from stacks import hyperpod
from tests.conftest import CAPABILITIES, GATED, ROOT, patched_context


def _one(s, suffix, type_):
    (resource,) = s.resources(suffix, type_).values()
    return resource["Properties"]


def _problems(patch: dict) -> list[str]:
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", patch), "dev")
    return err.value.problems


# ------------------------------------------------------------------ every cluster option


def test_every_cluster_schema_property_is_mapped_from_config_or_left_out_with_a_reason(synth):
    schema = cfn_schema.resource("AWS::SageMaker::Cluster")
    top = set(schema["properties"])
    group = set(schema["definitions"]["ClusterInstanceGroup"]["properties"])
    unplaced = (top - set(hyperpod.SCHEMA_COVERAGE) - set(hyperpod.LEFT_OUT)) | (
        group - set(hyperpod.INSTANCE_GROUP_COVERAGE) - set(hyperpod.LEFT_OUT)
    )
    assert not unplaced, f"map these from config or list them in LEFT_OUT with a reason: {sorted(unplaced)}"
    read_only = {p.split("/")[-1] for p in schema["readOnlyProperties"]}
    assert {k for k, why in hyperpod.LEFT_OUT.items() if why == "read-only"} <= read_only
    # A mapped property reaches a template in at least one gated config.
    seen_top, seen_group = set(), set()
    for name in GATED:
        for res in synth(name).resources("hyperpod", "AWS::SageMaker::Cluster").values():
            seen_top |= set(res["Properties"])
            for g in res["Properties"]["InstanceGroups"]:
                seen_group |= set(g)
    seen_top.add("Tags")  # CDK adds tags at deploy from the stack's tags
    assert set(hyperpod.SCHEMA_COVERAGE) <= seen_top, set(hyperpod.SCHEMA_COVERAGE) - seen_top
    assert set(hyperpod.INSTANCE_GROUP_COVERAGE) <= seen_group, set(hyperpod.INSTANCE_GROUP_COVERAGE) - seen_group


def test_cluster_options_reach_the_template_in_the_schema_shapes(synth):
    cluster = _one(synth("cluster-options"), "hyperpod", "AWS::SageMaker::Cluster")
    groups = {g["InstanceGroupName"]: g for g in cluster["InstanceGroups"]}
    assert cluster["TieredStorageConfig"] == {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20}
    system, gpu = groups["system"], groups["gpu"]
    assert system["MinInstanceCount"] == 1 and system["CapacityRequirements"] == {"OnDemand": {}}
    assert system["ImageId"] == "ami-0123456789abcdef0"
    assert system["ScheduledUpdateConfig"] == {
        "ScheduleExpression": "cron(0 3 ? * SUN *)",
        "DeploymentConfig": {
            "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "CAPACITY_PERCENTAGE", "Value": 50}},
            "WaitIntervalInSeconds": 300,
            "AutoRollbackConfiguration": [{"AlarmName": "hyperpod-dev-node-health"}],
        },
    }
    # InstanceType and InstanceRequirements are mutually exclusive (HyperPod's NodeClass page).
    assert "InstanceType" not in gpu and gpu["InstanceRequirements"] == {"InstanceTypes": ["ml.g5.8xlarge", "ml.g6.8xlarge"]}
    assert gpu["CapacityRequirements"] == {"Spot": {}} and gpu["NetworkInterface"] == {"InterfaceType": "efa"}


def test_auto_patching_and_the_ami_release_reach_the_template_in_the_schema_shapes(synth):
    cluster = _one(synth("cluster-options"), "hyperpod", "AWS::SageMaker::Cluster")
    groups = {g["InstanceGroupName"]: g for g in cluster["InstanceGroups"]}
    assert groups["gpu"]["AutoPatchConfig"] == {
        "PatchingStrategy": "WhenIdle",
        "DeploymentConfig": {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1}}, "WaitIntervalInSeconds": 120},
    }
    # The schema's own pattern (MAJOR.MINOR.PATCH) holds the value the config gives.
    rule = cfn_schema.definition("AWS::SageMaker::Cluster", "ClusterInstanceGroup")["properties"]["ImageReleaseVersion"]
    assert groups["reserved"]["ImageReleaseVersion"] == "1.0.0" and cfn_schema.matches(rule, "1.0.0")


def test_each_groups_volumes_take_its_own_key_with_the_documented_key_policy(synth):
    # HyperPod's page "Customer managed AWS KMS key encryption for SageMaker HyperPod"
    # (https://docs.aws.amazon.com/sagemaker/latest/dg/smcluster-cmk.html): the execution role may
    # kms:CreateGrant (for AWS resources) and kms:DescribeKey, both via SageMaker, and no
    # encryption-context condition; a root volume config has a key and no size. One key per group,
    # as the page recommends.
    s = synth("cluster-options")
    cluster = _one(s, "hyperpod", "AWS::SageMaker::Cluster")
    resources = s.templates["hyperpod"]["Resources"]
    role_id = cluster["InstanceGroups"][0]["ExecutionRole"]["Fn::GetAtt"][0]
    keys = set()
    for group in cluster["InstanceGroups"]:
        root, data = (c["EbsVolumeConfig"] for c in group["InstanceStorageConfigs"])
        assert root["RootVolume"] is True and "VolumeSizeInGB" not in root
        assert data["VolumeSizeInGB"] > 0 and "RootVolume" not in data and data["VolumeKmsKeyId"] == root["VolumeKmsKeyId"]
        keys.add(root["VolumeKmsKeyId"]["Fn::GetAtt"][0])
    assert len(keys) == len(cluster["InstanceGroups"])
    via = {"kms:ViaService": "sagemaker.us-east-1.amazonaws.com"}  # the stack's concrete region
    for key_id in keys:
        key = resources[key_id]["Properties"]
        assert key["EnableKeyRotation"] is True
        ours = {st["Sid"]: st for st in key["KeyPolicy"]["Statement"] if st.get("Sid", "").startswith("HyperPod")}
        grants, describe = ours["HyperPodExecutionRoleGrants"], ours["HyperPodExecutionRoleDescribe"]
        assert grants["Principal"] == describe["Principal"] == {"AWS": {"Fn::GetAtt": [role_id, "Arn"]}}
        assert grants["Action"] == "kms:CreateGrant" and describe["Action"] == "kms:DescribeKey"
        assert grants["Condition"] == {"StringEquals": via, "Bool": {"kms:GrantIsForAWSResource": "true"}}
        assert describe["Condition"] == {"StringEquals": via}
        assert not any("EncryptionContext" in json.dumps(st.get("Condition", {})) for st in key["KeyPolicy"]["Statement"])
    # The role's own grant names exactly these keys, and exists before the cluster.
    (policy_id,) = [k for k, r in s.resources("hyperpod", "AWS::IAM::ManagedPolicy").items()
                    if any(st.get("Sid") == "VolumeKeys" for st in r["Properties"]["PolicyDocument"]["Statement"])]
    (statement,) = resources[policy_id]["Properties"]["PolicyDocument"]["Statement"]
    assert sorted(statement["Action"]) == ["kms:CreateGrant", "kms:DescribeKey"]
    assert {r["Fn::GetAtt"][0] for r in statement["Resource"]} == keys
    cluster_id = next(iter(s.resources("hyperpod", "AWS::SageMaker::Cluster")))
    assert policy_id in resources[cluster_id]["DependsOn"]


def test_a_given_volume_key_is_used_as_it_is_and_granted_to_the_role_alone():
    from aws_cdk.assertions import Match, Template

    arn = "arn:aws:kms:us-east-1:111111111111:key/0a1b2c3d-1111-2222-3333-444455556666"
    patch = {"hyperpod": {"continuous_provisioning": True, "volume_encryption": {"kms_key_arn": arn, "root_volume": False}}}
    settings = validation.load_settings(patched_context("dev", patch), "dev")[0]
    template = Template.from_stack(_hyperpod_stack(settings))
    template.resource_count_is("AWS::KMS::Key", 0)
    template.has_resource_properties("AWS::SageMaker::Cluster", {"InstanceGroups": Match.array_with([Match.object_like(
        {"InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500, "VolumeKmsKeyId": arn}}]})])})
    template.has_resource_properties("AWS::IAM::ManagedPolicy", {"PolicyDocument": {"Statement": [
        {"Sid": "VolumeKeys", "Effect": "Allow", "Action": ["kms:CreateGrant", "kms:DescribeKey"], "Resource": arn}]}})


def _hyperpod_stack(settings):
    """Only the hyperpod stack's template, composed as app.py composes (no nag, no synth to disk)."""
    import aws_cdk as cdk

    import app
    from tests.conftest import CONTEXT

    flags = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
    stacks = app.compose(cdk.App(context={**flags, "aws:cdk:bundling-stacks": []}), settings)
    return next(s for s in stacks if s.stack_name.endswith("-hyperpod"))


@pytest.mark.parametrize(
    "patch, field, says",
    [
        ({"hyperpod": {"volume_encryption": {}}}, "hyperpod.volume_encryption", "continuous node provisioning"),
        ({"hyperpod": {"continuous_provisioning": True, "volume_encryption": {"kms_key_arn": "alias/nodes"}}},
         "hyperpod.volume_encryption.kms_key_arn", "must be a KMS key ARN"),
        ({"hyperpod": {"continuous_provisioning": True,
                       "volume_encryption": {"kms_key_arn": "arn:aws:kms:us-west-2:111111111111:key/0a1b2c3d"}}},
         "hyperpod.volume_encryption.kms_key_arn", "take a key of that region"),
    ],
)
def test_volume_encryption_is_refused_where_hyperpod_does_not_take_it(patch, field, says):
    assert any(line.startswith(f"dev: {field}: ") and says in line for line in _problems(patch)), _problems(patch)


@pytest.mark.parametrize(
    "group, field, says",
    [
        # The schema's enum and pattern, read from cfn-lint's schema (infra/config/limits.py).
        ({"auto_patch": {"strategy": "Sometimes"}}, "auto_patch.strategy", "is not one of WhenIdle, WhenAllIdle"),
        ({"auto_patch": {"strategy": "WhenIdle", "batch": {"unit": "percent", "value": 150}}}, "auto_patch.batch.value", "1 to 100 percent"),
        ({"image_release_version": "2025.06"}, "image_release_version", "pattern ^[0-9]+\\.[0-9]+\\.[0-9]+$"),
        ({"image_release_version": "1.2.3", "image_id": "ami-0123456789abcdef0"}, "image_release_version", "give one of them"),
        ({"scheduled_update": {"schedule": "every sunday"}}, "scheduled_update.schedule", "must be cron("),
        ({"alternative_instance_types": ["ml.g5.12xlarge"]}, "alternative_instance_types[0]", "a job sized for one must fit the other"),
        ({"min_count": 3}, "min_count", "must be 0 to count (1)"),
        ({"image_id": "ubuntu-22"}, "image_id", "must be an AMI id"),
        ({"capacity": "spot", "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p"}, "capacity", "training plan"),
    ],
)
def test_cluster_options_are_validated_against_the_schema(group, field, says):
    groups = [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}, {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1, **group}]
    lines = _problems({"hyperpod": {"instance_groups": groups}})
    assert any(f"hyperpod.instance_groups[1].{field}" in line and says in line for line in lines), lines


# ------------------------------------------------------------------ Karpenter


def test_karpenter_turns_on_autoscaling_with_the_documented_cluster_role(synth):
    s = synth("karpenter")
    cluster = _one(s, "hyperpod", "AWS::SageMaker::Cluster")
    assert cluster["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    assert cluster["NodeProvisioningMode"] == "Continuous"  # Karpenter is built on continuous provisioning
    role_id = cluster["ClusterRole"]["Fn::GetAtt"][0]
    role = s.templates["hyperpod"]["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "hyperpod.sagemaker.amazonaws.com"}
    # "Create an IAM role for HyperPod autoscaling with Karpenter": these actions, nothing more.
    (policy,) = [p for p in s.resources("hyperpod", "AWS::IAM::ManagedPolicy").values() if p["Properties"].get("Roles") == [{"Ref": role_id}]]
    actions = {a for st in policy["Properties"]["PolicyDocument"]["Statement"] for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
    assert actions == {"sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes", "kms:CreateGrant", "kms:DescribeKey"}
    # The grants it may give on volume keys: those the awsome Terraform's Karpenter role gives,
    # RetireGrant beside CreateGrant, each one KMS knows (botocore's GrantOperation enum).
    import botocore.session

    (grants,) = [st for st in policy["Properties"]["PolicyDocument"]["Statement"] if "kms:CreateGrant" in st["Action"]]
    operations = grants["Condition"]["ForAllValues:StringEquals"]["kms:GrantOperations"]
    reference = json.loads((ROOT / "tests" / "fixtures" / "karpenter_role_reference.json").read_text())["grant_operations"]
    assert set(operations) == set(reference) and "RetireGrant" in operations
    enum = botocore.session.get_session().get_service_model("kms").shape_for("GrantOperation").enum
    assert set(operations) <= set(enum)
    gpu = next(g for g in cluster["InstanceGroups"] if g["InstanceGroupName"] == "gpu")
    # Starts at 0, without deep health checks (HyperPod's NodeClass page: not supported there).
    assert gpu["InstanceCount"] == 0 and "OnStartDeepHealthChecks" not in gpu


def test_the_node_gate_skips_groups_that_start_at_zero(synth):
    gate = _one(synth("karpenter"), "hyperpod", "Custom::HyperPodNodesReady")
    assert gate["InstanceGroups"] == {"system": "1"}


def test_node_class_and_pool_are_applied_once_karpenter_serves_them(synth):
    s = synth("karpenter")
    objects = s.manifests("hyperpod")
    node_class = next(o for o in objects if o["kind"] == "HyperpodNodeClass")
    pool = next(o for o in objects if o["kind"] == "NodePool")
    assert node_class["apiVersion"] == "karpenter.sagemaker.amazonaws.com/v1" and node_class["spec"]["instanceGroups"] == ["gpu"]
    assert pool["apiVersion"] == "karpenter.sh/v1"
    assert pool["spec"]["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.sagemaker.amazonaws.com", "kind": "HyperpodNodeClass", "name": node_class["metadata"]["name"]}
    assert pool["spec"]["limits"] == {"nvidia.com/gpu": "4"}  # max_count 4 x one A10G
    (manifest_id,) = s.resources("hyperpod", "Custom::AWSCDK-EKS-KubernetesResource")
    depends = s.templates["hyperpod"]["Resources"][manifest_id].get("DependsOn", [])
    (crd_gate,) = [k for k, r in s.resources("hyperpod", "Custom::AWSCDK-EKS-KubernetesObjectValue").items()]
    assert crd_gate in depends


def test_karpenter_can_scale_a_group_from_zero_for_the_job_and_waits_for_its_crds_after_the_nodes(synth):
    # HyperPod docs, autoscaling with Karpenter ("Create a NodePool"): the provider supports the
    # requirement keys node.kubernetes.io/instance-type, topology.kubernetes.io/zone and
    # kubernetes.io/arch. Karpenter leaves a pod Pending, adding no node, when its required
    # affinity names a label no NodePool can give a new node.
    supported = {"node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "kubernetes.io/arch"}
    s = synth("karpenter")
    pool = next(o for o in s.manifests("hyperpod") if o["kind"] == "NodePool")
    declared = {r["key"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    assert declared <= supported
    job = next(o for o in s.manifests("sample-job") if o["kind"] == "HyperPodPyTorchJob")
    affinity = job["spec"]["replicaSpecs"][0]["template"]["spec"]["affinity"]["nodeAffinity"]
    required = {e["key"] for t in affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                for e in t["matchExpressions"]}
    assert required <= declared
    preferred = {e["key"] for p in affinity["preferredDuringSchedulingIgnoredDuringExecution"] for e in p["preference"]["matchExpressions"]}
    assert {job_manifest.HEALTH_LABEL, job_manifest.GROUP_LABEL} <= preferred
    # HyperPod installs the CRDs after the cluster reports done (continuous provisioning): the
    # 10-minute wait for them starts once the node gate's last link is done.
    (crd_gate,) = s.resources("hyperpod", "Custom::AWSCDK-EKS-KubernetesObjectValue").values()
    nodes = s.resources("hyperpod", "Custom::HyperPodNodesReady")
    assert max(nodes, key=lambda k: nodes[k]["Properties"]["Link"]) in crd_gate["DependsOn"]


@pytest.mark.parametrize(
    "patch, says",
    [
        ({"hyperpod": {"autoscaling": "karpenter"}}, "hyperpod.autoscaling: 'karpenter' needs at least one instance group with autoscaled"),
        ({"hyperpod": {"autoscaling": "karpenter", "instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
          {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 2, "autoscaled": True, "max_count": 4}]}}, "count: 2 must be 0"),
        ({"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
          {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 0, "autoscaled": True, "max_count": 4}]}}, 'needs hyperpod.autoscaling "karpenter"'),
        ({"hyperpod": {"autoscaling": "karpenter", "instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
          {"name": "gpu", "instance_type": "ml.p5.48xlarge", "count": 0, "autoscaled": True, "max_count": 2,
           "deep_health_checks": ["InstanceStress"]}]}}, "are not supported on an autoscaled group"),
    ],
)
def test_karpenter_mistakes_are_refused(patch, says):
    assert any(says in line for line in _problems(patch)), _problems(patch)


# ------------------------------------------------------------------ FSx for Lustre


def test_fsx_file_system_is_persistent_2_in_the_gpu_az_encrypted_with_our_key(synth):
    s = synth("fsx")
    props = _one(s, "cluster", "AWS::FSx::FileSystem")
    assert props["FileSystemType"] == "LUSTRE" and props["StorageCapacity"] == 2400
    assert props["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"
    assert props["LustreConfiguration"]["PerUnitStorageThroughput"] == 500
    assert props["KmsKeyId"] == {"Ref": next(k for k in s.resources("cluster", "AWS::KMS::Key") if k.startswith("DataKey"))}
    (subnet,) = props["SubnetIds"]
    producer, value = s.exported(subnet["Fn::ImportValue"])
    assert producer == "network" and value == {"Ref": next(k for k in s.resources("network", "AWS::EC2::Subnet") if "useast1a" in k)}
    (fs,) = s.resources("cluster", "AWS::FSx::FileSystem").values()
    assert fs["DeletionPolicy"] == "Delete"  # dev keeps no data; prod's retain_data retains it


def test_the_security_group_admits_lustre_ports_from_itself(synth):
    # FACTS (security group): Lustre TCP 988 and 1018-1023 from the group itself, as both references.
    s = synth("fsx")
    (sg_id,) = s.resources("network", "AWS::EC2::SecurityGroup")
    rules = [r["Properties"] for r in s.resources("network", "AWS::EC2::SecurityGroupIngress").values()]

    def admits(port):
        return any(
            r.get("SourceSecurityGroupId") == {"Fn::GetAtt": [sg_id, "GroupId"]}
            and (r["IpProtocol"] == "-1" or (r["IpProtocol"] == "tcp" and r["FromPort"] <= port <= r["ToPort"]))
            for r in rules
        )

    assert all(admits(port) for port in (988, *range(1018, 1024)))


def test_fsx_csi_driver_has_its_pod_identity_and_every_team_gets_a_bound_claim(synth):
    s = synth("fsx")
    addons = {r["Properties"]["AddonName"]: r for r in s.resources("addons", "AWS::EKS::Addon").values()}
    assert "aws-fsx-csi-driver" in addons
    associations = [r["Properties"] for r in s.resources("addons", "AWS::EKS::PodIdentityAssociation").values()]
    assert any(a["Namespace"] == "kube-system" and a["ServiceAccount"] == "fsx-csi-controller-sa" for a in associations)
    objects = s.manifests("addons")
    pvc = next(o for o in objects if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == "fsx")
    pv = next(o for o in objects if o["kind"] == "PersistentVolume" and o["metadata"]["name"] == pvc["spec"]["volumeName"])
    assert pv["spec"]["csi"]["driver"] == "fsx.csi.aws.com" and pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["claimRef"] == {"namespace": pvc["metadata"]["namespace"], "name": "fsx"}
    assert pvc["metadata"]["namespace"] == "hyperpod-ns-ml-research"
    # The team's volume is its own directory (the mount name is a CloudFormation token here).
    assert pv["spec"]["csi"]["volumeAttributes"]["mountname"].endswith("/hyperpod-ns-ml-research")
    # Made before the team's volume, by a Job on the root, which a gate waits for.
    job = next(o for o in objects if o["kind"] == "Job")
    assert job["metadata"]["namespace"] == "kube-system" and "mkdir -p /fsx/hyperpod-ns-ml-research" in job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    (gate,) = [r for r in s.resources("addons", "Custom::AWSCDK-EKS-KubernetesObjectValue").values() if r["Properties"]["ObjectName"] == job["metadata"]["name"]]
    assert gate["Properties"]["JsonPath"] == ".status.succeeded"
    execution = [st for p in s.resources("hyperpod", "AWS::IAM::ManagedPolicy").values() for st in p["Properties"]["PolicyDocument"]["Statement"]]
    assert any(st.get("Sid") == "FsxDescribe" and st["Action"] == "fsx:DescribeFileSystems" for st in execution)


def test_the_job_checkpoints_to_fsx_and_the_official_models_accept_it(synth, monkeypatch):
    import importlib.metadata
    import importlib.util

    settings = synth("fsx").settings
    job = job_manifest.build(settings, image="111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1")
    path = importlib.metadata.distribution("sagemaker-hyperpod").locate_file("sagemaker/hyperpod/training/config/hyperpod_pytorch_job_unified_config.py")
    spec = importlib.util.spec_from_file_location("hp_unified_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._HyperPodPytorchJob.model_validate(job["spec"], by_alias=False, by_name=True)
    pod = job["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx"}} in pod["volumes"]
    command = pod["containers"][0]["command"]
    assert "--checkpoint-dir=/fsx/checkpoints/llama3-1-8b-fsdp" in command
    # What train.py itself reads from those arguments (its own parser; it runs as a script beside log_format).
    monkeypatch.syspath_prepend(str(ROOT / "training"))
    import train

    args = train.parse_args(command[command.index("/workspace/train.py") + 1:])
    assert args.data_files == ["/fsx/datasets/c4/*.txt"] and args.checkpoint_dir == "/fsx/checkpoints/llama3-1-8b-fsdp"


@pytest.mark.parametrize(
    "patch, says",
    [
        ({"fsx": {"enabled": True, "storage_gib": 3600}}, "fsx.storage_gib: 3600 must be 1200, 2400 or a multiple of 2400"),
        ({"fsx": {"enabled": True, "throughput_per_tib": 200}}, "fsx.throughput_per_tib: 200 must be one of 125, 250, 500, 1000"),
        ({"fsx": {"enabled": True, "availability_zone": "us-east-1c"}}, "fsx.availability_zone: 'us-east-1c' has no HyperPod subnet"),
        ({"sample_job": {"checkpoint_to": "fsx"}}, "sample_job.checkpoint_to: 'fsx' needs fsx.enabled"),
        ({"fsx": {"enabled": True}, "sample_job": {"dataset": {"files": ["/data/c4.txt"]}}}, "sample_job.dataset.files[0]: '/data/c4.txt' must be a path under /fsx/"),
    ],
)
def test_fsx_mistakes_are_refused(patch, says):
    assert any(says in line for line in _problems(patch)), _problems(patch)


# ------------------------------------------------------------------ closed networks


def test_a_closed_network_has_no_nat_and_an_endpoint_for_every_service_the_nodes_call(synth):
    s = synth("closed-network")
    assert not s.resources("network", "AWS::EC2::NatGateway") and not s.resources("network", "AWS::EC2::InternetGateway")
    endpoints = [r["Properties"] for r in s.resources("network", "AWS::EC2::VPCEndpoint").values()]
    interface = [e for e in endpoints if e.get("VpcEndpointType") == "Interface"]
    services = {e["ServiceName"].rsplit("us-east-1.", 1)[1] for e in interface}
    assert services == set(config.ENDPOINT_SERVICES) and all(e["PrivateDnsEnabled"] for e in interface)
    gateways = [e for e in endpoints if e.get("VpcEndpointType", "Gateway") == "Gateway"]
    assert [json.dumps(e["ServiceName"]).endswith('".s3"]]}') for e in gateways] == [True]  # S3 stays a gateway endpoint
    routes = [r["Properties"] for r in s.resources("network", "AWS::EC2::Route").values()]
    assert not [r for r in routes if r.get("DestinationCidrBlock") == "0.0.0.0/0"]


def test_endpoints_admit_https_from_every_vpc_cidr_block(synth):
    for name, blocks in (("closed-network", ["10.192.0.0/16", "10.1.0.0/16"]), ("existing-vpc", ["10.20.0.0/16", "100.64.0.0/16"])):
        s = synth(name)
        (sg,) = [r for k, r in s.resources("network", "AWS::EC2::SecurityGroup").items() if k.startswith("EndpointSecurityGroup")]
        admitted = sorted(r["CidrIp"] for r in sg["Properties"]["SecurityGroupIngress"] if r["FromPort"] == 443)
        assert admitted == sorted(blocks), name


def test_a_closed_network_says_what_will_not_work_and_refuses_what_cannot():
    settings, warnings = validation.load_settings(patched_context("dev", CAPABILITIES["closed-network"]), "dev")
    assert any("no internet access" in w and "copied into ECR" in w for w in warnings)
    # The job cannot stream from Hugging Face there (its dataset and tokenizer must be on FSx).
    lines = _problems(config.deep_merge(CAPABILITIES["closed-network"], {"sample_job": {"dataset": {"files": []}, "tokenizer": "meta-llama/Llama-3.1-8B", "hf_token_secret": "t"}}))
    assert any(l.startswith("dev: sample_job.dataset.files: [] needs a NAT gateway") and "under /fsx/" in l for l in lines)
    assert any(l.startswith("dev: sample_job.tokenizer: 'meta-llama/Llama-3.1-8B' needs a NAT gateway") for l in lines)
    assert any('set network.interface_endpoints to "all"' in line for line in _problems({"network": {"nat_gateways": 0}}))
    lines = _problems({"network": {"nat_gateways": 0, "interface_endpoints": "all"}, "eks": {"endpoint_access": "public"}})
    assert any(l.startswith("dev: eks.endpoint_access: 'public'") and "unreachable" in l for l in lines)


def test_the_review_judges_an_existing_vpcs_own_blocks_as_inside(synth):
    from cli.review import exposure
    from cli.review.assembly import load_stacks

    stacks = load_stacks(synth("existing-vpc").outdir)
    # The endpoint group admits HTTPS from both of config's blocks (10.20.0.0/16, 100.64.0.0/16):
    # inside the VPC, though no VPC resource in the template says so.
    assert exposure.open_ingress(stacks) == []
    outside = json.loads(json.dumps(stacks[0].template))
    outside["Outputs"]["VpcCidrBlocks"]["Value"] = "10.20.0.0/16"
    assert [r["cidr"] for r in exposure.open_ingress([type(stacks[0])(stacks[0].name, outside, [])])] == ["100.64.0.0/16"]


def test_an_existing_vpc_gets_its_flow_logs_and_takes_no_nat_setting(synth):
    s = synth("existing-vpc")
    (flow,) = s.resources("network", "AWS::EC2::FlowLog").values()
    assert flow["Properties"]["ResourceId"] == "vpc-0a1b2c3d4e5f60718"
    assert not s.resources("network", "AWS::EC2::NatGateway")
    patch = json.loads(json.dumps(CAPABILITIES["existing-vpc"]))
    patch["network"]["nat_gateways"] = 1
    assert any("network.nat_gateways: 1 must be left out with existing_vpc" in line for line in _problems(patch))


def test_the_review_shows_the_new_resources(synth):
    from cli.review import report as review

    fsx = review.build(synth("fsx").outdir, with_lint=False)
    assert any(r["type"] == "AWS::FSx::FileSystem" for r in fsx["risk"]["stateful"])
    karpenter = review.build(synth("karpenter").outdir, with_lint=False)
    assert any("AutoscalerRole" in r["role"] for r in karpenter["iam"]["detail"])
    assert [q["line"] for q in karpenter["risk"]["quotas"]] == [
        "1 x ml.m5.4xlarge for cluster usage",
        "ml.g5.8xlarge for cluster usage: autoscaled from 0 by Karpenter; cover the most its NodePool admits, 4 node(s)",  # max_count 4
    ]
    closed = review.build(synth("closed-network").outdir, with_lint=False)
    # Which images are copied from where, and how: Docker Hub's with the credentials config names.
    copies = {c["source"]: c for c in closed["image_copies"]}
    assert copies["docker.io/mpioperator/mpi-operator:0.5"]["credentials"] == "hyperpod/dockerhub"
    assert copies["docker.io/mpioperator/mpi-operator:0.5"]["repository"] == "hyperpod-dev/mpioperator/mpi-operator:0.5"
    assert copies["nvcr.io/nvidia/k8s-device-plugin:v0.16.1"]["credentials"] is None
    text = review.to_markdown(closed)
    assert ("- docker.io/kubeflow/training-operator:v1-855e096 -> hyperpod-dev/kubeflow/training-operator:v1-855e096, "
            "with the credentials in Secrets Manager secret hyperpod/dockerhub") in text
    assert not review.build(synth("dev").outdir, with_lint=False)["image_copies"]
    (line,) = [l for l in closed["cost"]["lines"] if l["item"].startswith("interface endpoints")]
    assert line["count"] == len(config.ENDPOINT_SERVICES) * 3 and not [l for l in closed["cost"]["lines"] if "NAT" in l["item"]]


# The nested properties of the instance-group properties stacks/hyperpod.py maps (INSTANCE_GROUP_COVERAGE)
# that no gated config sets, each with why: the test below walks the schema's definitions, and every
# nested property either reaches a template in some config or is named here, so one the schema gains
# is decided, not let through.
# Nested properties config sets that no gated config happens to: each with the field of the
# rolling deployment (infra/config/hyperpod.py Deployment) it comes from (stacks/hyperpod.py _deployment).
NESTED_COVERAGE = {
    f"{parent}.DeploymentConfig.{path}": field
    for parent in ("AutoPatchConfig", "ScheduledUpdateConfig")
    for path, field in (
        ("AutoRollbackConfiguration", "rollback_alarms"),
        ("RollingUpdatePolicy.RollbackMaximumBatchSize", "rollback_batch"),
        ("RollingUpdatePolicy.RollbackMaximumBatchSize.Type", "rollback_batch"),
        ("RollingUpdatePolicy.RollbackMaximumBatchSize.Value", "rollback_batch"),
    )
}
# Nested properties no config sets, with why.
NESTED_LEFT_OUT = {
    "AutoPatchConfig.PatchSchedule": "HyperPod sets and reports the next patch date; nothing to set at deploy",
    "AutoPatchConfig.PatchSchedule.NextPatchDate": "as PatchSchedule",
    "LifeCycleConfig.OnInitComplete": "the EKS lifecycle runs OnCreate only (lifecycle/on_create.sh)",
    "OverrideVpcConfig.SecurityGroupIds": "the cluster's security group serves every group; only the subnet moves",
}


def _schema_paths(definitions: dict, name: str, prefix: str = "", seen: frozenset = frozenset()) -> set[str]:
    """Every property path under definition `name`, following $ref and array items (each definition once per path)."""
    def ref(node: dict) -> str | None:
        node = node.get("items", node) if node.get("type") == "array" else node
        return node["$ref"].split("/")[-1] if "$ref" in node else None

    out = set()
    for key, node in definitions[name].get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        out.add(path)
        target = ref(node)
        if target and target not in seen and "properties" in definitions[target]:
            out |= _schema_paths(definitions, target, path, seen | {target})
    return out


def _template_paths(value, prefix: str = "") -> set[str]:
    if isinstance(value, list):
        return set().union(*(_template_paths(v, prefix) for v in value)) if value else set()
    if not isinstance(value, dict):
        return set()
    out = set()
    for key, inner in value.items():
        path = f"{prefix}.{key}" if prefix else key
        out |= {path} | _template_paths(inner, path)
    return out


def test_every_nested_instance_group_property_is_set_by_some_config_or_left_out_with_a_reason(synth):
    # cfn-lint's schema of AWS::SageMaker::Cluster, walked below ClusterInstanceGroup: a property the schema
    # gains inside one we map (AutoPatchConfig.DrainPolicy, say) fails here until it is decided.
    definitions = cfn_schema.resource("AWS::SageMaker::Cluster")["definitions"]
    mapped = set(hyperpod.INSTANCE_GROUP_COVERAGE)
    nested = {p for p in _schema_paths(definitions, "ClusterInstanceGroup") if "." in p and p.split(".")[0] in mapped}
    seen = set()
    for name in GATED:
        for res in synth(name).resources("hyperpod", "AWS::SageMaker::Cluster").values():
            for group in res["Properties"]["InstanceGroups"]:
                seen |= _template_paths(group)
    undecided = nested - seen - set(NESTED_COVERAGE) - set(NESTED_LEFT_OUT)
    assert not undecided, (f"set these from config (in some gated config, or NESTED_COVERAGE), or list them in NESTED_LEFT_OUT "
                           f"with a reason: {sorted(undecided)}")
    named = set(NESTED_COVERAGE) | set(NESTED_LEFT_OUT)
    assert named <= nested, named - nested  # nothing named that the schema no longer has
    assert set(NESTED_COVERAGE.values()) <= set(config.hyperpod.Deployment.model_fields)
