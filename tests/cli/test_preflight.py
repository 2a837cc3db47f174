"""preflight: each check passes and fails against moto, or a botocore Stubber with real
response shapes where moto does not serve the API."""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from infra import config, validation
from cli import preflight
from tests.conftest import patched_context

REGION = "us-east-1"


def _settings(patch=None, env="dev"):
    return validation.load_settings(patched_context(env, patch or {}), env)[0]


@pytest.fixture
def aws(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "111111111111")
    with mock_aws():
        yield preflight.Clients(boto3.Session(region_name=REGION), REGION)


def _status(results):
    return [r.status for r in results]


def test_account_matches(aws):
    assert _status(preflight.check_account(_settings(), aws)) == ["pass"]


def test_account_mismatch_fails(aws):
    (r,) = preflight.check_account(_settings({"account": "222222222222"}), aws)
    assert r.status == "fail" and "222222222222" in r.detail and r.action


def test_zones_that_map_to_the_expected_ids_pass(aws):
    zones = {z["ZoneName"]: z["ZoneId"] for z in aws("ec2").describe_availability_zones()["AvailabilityZones"]}
    s = _settings({"availability_zone_ids": [zones[a] for a in ("us-east-1a", "us-east-1b", "us-east-1c")]})
    assert _status(preflight.check_zones(s, aws)) == ["pass", "pass", "pass"]


def test_a_remapped_or_missing_zone_fails(aws):
    results = preflight.check_zones(_settings({"availability_zone_ids": ["use1-az7", "use1-az8", "use1-az9"]}), aws)
    assert _status(results) == ["fail", "fail", "fail"] and "config expects use1-az7" in results[0].detail
    s = _settings({"availability_zones": ["us-east-1a", "us-east-1z"], "network": {"nat_gateways": 1}})
    assert _status(preflight.check_zones(s, aws)) == ["warn", "fail"]


def _quota_client(values: dict):
    client = boto3.client("service-quotas", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(
        "list_service_quotas",
        {
            "Quotas": [
                {"ServiceCode": "sagemaker", "ServiceName": "Amazon SageMaker", "QuotaCode": f"L-{i:08d}",
                 "QuotaName": f"{t} for cluster usage", "Value": float(v), "Unit": "None", "Adjustable": True, "GlobalQuota": False}
                for i, (t, v) in enumerate(values.items())
            ]
        },
        {"ServiceCode": "sagemaker"},
    )
    stub.activate()
    return client


def test_quotas_covering_every_type_pass():
    aws = preflight.Clients(None, REGION, {"service-quotas": _quota_client({"ml.m5.4xlarge": 4, "ml.g5.8xlarge": 2})})
    assert _status(preflight.check_quotas(_settings(), aws)) == ["pass", "pass"]


def test_a_short_quota_fails_and_an_unnamed_one_warns():
    aws = preflight.Clients(None, REGION, {"service-quotas": _quota_client({"ml.g5.8xlarge": 0})})
    results = {r.check: r for r in preflight.check_quotas(_settings(), aws)}
    assert results["quota ml.g5.8xlarge"].status == "fail"
    assert "request an increase of 'ml.g5.8xlarge for cluster usage' to 1" in results["quota ml.g5.8xlarge"].action
    assert results["quota ml.m5.4xlarge"].status == "warn"
    # SageMaker lists no HyperPod types per region (no such operation in botocore's sagemaker model):
    # a type without its quota in the region is said as one HyperPod may not offer there.
    import botocore.session

    operations = botocore.session.get_session().get_service_model("sagemaker").operation_names
    assert not [op for op in operations if "InstanceType" in op and op.startswith(("List", "Describe"))]
    assert "HyperPod may not offer ml.m5.4xlarge here" in results["quota ml.m5.4xlarge"].detail


def _eks_cluster(aws, tags):
    aws("eks").create_cluster(
        name="hyperpod-dev", roleArn="arn:aws:iam::111111111111:role/eks", resourcesVpcConfig={"subnetIds": []}, tags=tags
    )


def test_no_eks_cluster_or_our_own_passes(aws):
    assert _status(preflight.check_eks_name(_settings(), aws)) == ["pass"]
    _eks_cluster(aws, {preflight.STACK_TAG: "hyperpod-dev-cluster"})
    (r,) = preflight.check_eks_name(_settings(), aws)
    assert r.status == "pass" and "an update" in r.detail


def test_someone_elses_eks_cluster_with_the_name_fails(aws):
    _eks_cluster(aws, {preflight.STACK_TAG: "another-stack"})
    (r,) = preflight.check_eks_name(_settings(), aws)
    assert r.status == "fail" and "another-stack" in r.detail


def _hyperpod_cluster(aws, stack):
    aws("sagemaker").create_cluster(
        ClusterName="hyperpod-dev-hp",
        InstanceGroups=[{"InstanceGroupName": "g", "InstanceType": "ml.m5.4xlarge", "InstanceCount": 1, "ThreadsPerCore": 1,
                         "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-x/p", "OnCreate": "on_create.sh"},
                         "ExecutionRole": "arn:aws:iam::111111111111:role/x"}],
        Tags=[{"Key": preflight.STACK_TAG, "Value": stack}],
    )


def test_hyperpod_name_free_or_ours_passes(aws):
    assert _status(preflight.check_hyperpod_name(_settings(), aws)) == ["pass"]
    _hyperpod_cluster(aws, "hyperpod-dev-hyperpod")
    assert _status(preflight.check_hyperpod_name(_settings(), aws)) == ["pass"]


def test_hyperpod_name_taken_by_another_stack_fails(aws):
    _hyperpod_cluster(aws, "someone-else")
    (r,) = preflight.check_hyperpod_name(_settings(), aws)
    assert r.status == "fail" and "someone-else" in r.detail


def _versions_client(versions: list[dict]):
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_cluster_versions", {"clusterVersions": versions}, {"clusterVersions": [_settings().eks.version]})
    stub.activate()
    return client


def test_offered_version_in_standard_support_passes():
    version = _settings().eks.version
    aws = preflight.Clients(None, REGION, {"eks": _versions_client([{"clusterVersion": version, "versionStatus": "STANDARD_SUPPORT"}])})
    assert _status(preflight.check_eks_version(_settings(), aws)) == ["pass"]


def test_version_not_offered_fails():
    aws = preflight.Clients(None, REGION, {"eks": _versions_client([])})
    (r,) = preflight.check_eks_version(_settings(), aws)
    assert r.status == "fail" and f"{_settings().eks.version} is not offered" in r.detail


ADMIN = "arn:aws:iam::111111111111:role/PlatformAdmin"


def test_existing_admin_role_passes(aws):
    aws("iam").create_role(RoleName="PlatformAdmin", AssumeRolePolicyDocument="{}")
    assert _status(preflight.check_admins(_settings({"eks": {"admin_principal_arns": [ADMIN]}}), aws)) == ["pass"]


def test_missing_admin_role_fails(aws):
    (r,) = preflight.check_admins(_settings({"eks": {"admin_principal_arns": [ADMIN]}}), aws)
    assert r.status == "fail" and ADMIN in r.detail


def test_every_team_principal_must_exist_and_one_of_another_account_is_said(aws):
    # prod's teams each name a role of the account; EKS refuses an access entry for a principal
    # that does not exist, and the teams' entries come in the addons stack, late in the deploy.
    aws("iam").create_role(RoleName="Admin", AssumeRolePolicyDocument="{}")
    aws("iam").create_role(RoleName="ml-research-scientists", AssumeRolePolicyDocument="{}")
    results = {r.check: r for r in preflight.check_admins(_settings(env="prod"), aws)}
    assert {c: r.status for c, r in results.items()} == {
        "admin Admin": "pass", "team ml-research: ml-research-scientists": "pass", "team ml-production: ml-production-engineers": "fail"}
    assert results["team ml-production: ml-production-engineers"].action == "create it, or fix governance.teams[1].principals"
    # A config of account 222222222222 (validate warns of these) cannot be checked from it.
    other = {r.check: r.status for r in preflight.check_admins(_settings({"account": "222222222222"}, env="prod"), aws)}
    assert set(other.values()) == {"warn"}


def test_bootstrapped_account_passes(aws):
    aws("cloudformation").create_stack(
        StackName="CDKToolkit", TemplateBody='{"Resources": {"B": {"Type": "AWS::S3::Bucket"}}}'
    )
    assert _status(preflight.check_bootstrap(_settings(), aws)) == ["pass"]


def test_missing_bootstrap_fails_with_the_command(aws):
    (r,) = preflight.check_bootstrap(_settings(), aws)
    assert r.status == "fail" and r.action == "cdk bootstrap aws://111111111111/us-east-1"


def test_run_reports_a_table_and_turns_api_errors_into_failures(aws):
    # moto serves CloudFormation's stacks but not DescribeType: that one call answers in its model's shape.
    from botocore.awsrequest import AWSResponse

    aws("cloudformation").meta.events.register("before-call.cloudformation.DescribeType", lambda params, **_: (
        AWSResponse(None, 200, {}, None), {"TypeName": params["body"]["TypeName"], "DeprecatedStatus": "LIVE"}))
    # Nor SageMaker's ListCapacityReservations: an account with none.
    aws("sagemaker").meta.events.register("before-call.sagemaker.ListCapacityReservations", lambda **_: (
        AWSResponse(None, 200, {}, None), {"CapacityReservationSummaries": []}))
    results = preflight.run(_settings(), session=aws.session, clients={"service-quotas": _quota_client({"ml.m5.4xlarge": 1, "ml.g5.8xlarge": 1}),
                                                                        "eks": aws("eks"), "cloudformation": aws("cloudformation"),
                                                                        "sagemaker": aws("sagemaker")})
    text = preflight.table(results)
    assert "checks:" in text.splitlines()[-1]
    (version,) = [r for r in results if r.check == "eks_version"]
    assert version.status == "fail" and "could not check" in version.detail  # moto has no DescribeClusterVersions
    assert {r.status for r in results if r.check.startswith("type AWS::")} == {"pass"}


def _addon_versions_client(offered: dict[str, list[str]]):
    """DescribeAddonVersions answers in its real shape (botocore validates it): one entry per
    add-on the deploy creates, with the versions given (none: the add-on has no build)."""
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    version = _settings().eks.version
    for name in preflight.account._addons_to_create(_settings()):
        versions = [{"addonVersion": v} for v in offered.get(name, ["v1.0.0-eksbuild.1"])]
        stub.add_response(
            "describe_addon_versions",
            {"addons": [{"addonName": name, "addonVersions": versions}] if versions else []},
            {"kubernetesVersion": version, "addonName": name},
        )
    stub.activate()
    return client


def test_every_addon_the_deploy_creates_is_asked_for_the_chosen_kubernetes_version():
    wanted = preflight.account._addons_to_create(_settings())
    assert {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "cert-manager"} <= set(wanted)
    assert "amazon-sagemaker-hyperpod-training-operator" in wanted
    aws = preflight.Clients(None, REGION, {"eks": _addon_versions_client({})})
    assert set(_status(preflight.check_addon_versions(_settings(), aws))) == {"pass"}


def test_an_addon_without_a_build_for_the_version_fails_before_deploy():
    aws = preflight.Clients(None, REGION, {"eks": _addon_versions_client({"amazon-sagemaker-hyperpod-training-operator": []})})
    failed = [r for r in preflight.check_addon_versions(_settings(), aws) if r.status == "fail"]
    assert [r.check for r in failed] == ["add-on amazon-sagemaker-hyperpod-training-operator"]
    assert f"no version for Kubernetes {_settings().eks.version}" in failed[0].detail


def test_a_kept_bucket_from_an_earlier_deploy_fails_with_the_flag_that_adopts_it(aws):
    settings = _settings(env="prod")
    aws("s3").create_bucket(Bucket=settings.lifecycle_bucket_name)
    aws("logs").create_log_group(logGroupName=f"/aws/eks/{settings.eks_cluster_name}/cluster")
    results = {r.check: r for r in preflight.check_retained_names(settings, aws)}
    kept = results[f"bucket {settings.lifecycle_bucket_name}"]
    assert kept.status == "fail" and "--import-existing-resources" in kept.action
    assert results[f"log group /aws/eks/{settings.eks_cluster_name}/cluster"].status == "fail"
    assert results[f"bucket {settings.checkpoint_bucket_name}"].status == "pass"
    assert preflight.check_retained_names(_settings(env="dev"), aws) == []  # dev keeps nothing


def test_a_kept_name_that_its_stack_still_owns_passes(aws):
    settings = _settings(env="prod")
    aws("s3").create_bucket(Bucket=settings.lifecycle_bucket_name)
    aws("cloudformation").create_stack(StackName=settings.stack_name("cluster"),
                                       TemplateBody='{"Resources": {"B": {"Type": "AWS::S3::Bucket"}}}')
    results = {r.check: r for r in preflight.check_retained_names(settings, aws)}
    assert results[f"bucket {settings.lifecycle_bucket_name}"].status == "pass"


def test_an_ami_or_rollback_alarm_that_no_stack_creates_must_exist(aws):
    from tests.conftest import CAPABILITIES

    settings = validation.load_settings(patched_context("dev", CAPABILITIES["cluster-options"]), "dev")[0]
    failed = {r.check for r in preflight.check_named_resources(settings, aws) if r.status == "fail"}
    assert failed == {"AMI ami-0123456789abcdef0", "alarm hyperpod-dev-node-health"}
    aws("cloudwatch").put_metric_alarm(AlarmName="hyperpod-dev-node-health", MetricName="x", Namespace="y", Statistic="Sum",
                                       Period=60, EvaluationPeriods=1, Threshold=1, ComparisonOperator="GreaterThanThreshold")
    still = {r.check for r in preflight.check_named_resources(settings, aws) if r.status == "fail"}
    assert still == {"AMI ami-0123456789abcdef0"}


def test_the_sample_jobs_token_secret_must_exist_before_the_deploy_reaches_its_stack(aws):
    # prod's job names the secret hf-token; the sample-job stack's DescribeSecret check would fail
    # last, after every other stack. moto's Secrets Manager answers ResourceNotFoundException as AWS does.
    settings = _settings(env="prod")
    (missing,) = [r for r in preflight.check_named_resources(settings, aws) if r.check == "secret hf-token"]
    assert missing.status == "fail" and "aws secretsmanager create-secret --name hf-token" in missing.action
    aws("secretsmanager").create_secret(Name="hf-token", SecretString="hf_example")
    (found,) = [r for r in preflight.check_named_resources(settings, aws) if r.check == "secret hf-token"]
    assert found.status == "pass"
    assert not [r for r in preflight.check_named_resources(_settings(), aws) if r.check.startswith("secret ")]  # dev names none


def test_an_endpoint_the_existing_vpc_already_has_is_named_before_the_deploy_fails_on_it(aws):
    from tests.conftest import CAPABILITIES

    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName="com.amazonaws.us-east-1.s3", VpcEndpointType="Gateway", RouteTableIds=[rt])
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName="com.amazonaws.us-east-1.ecr.dkr", VpcEndpointType="Interface", PrivateDnsEnabled=True)
    patch = config.deep_merge(CAPABILITIES["existing-vpc"], {"network": {"existing_vpc": {"vpc_id": vpc, "private_subnet_route_table_ids": [rt] * 3}}})
    settings = validation.load_settings(patched_context("dev", patch), "dev")[0]
    failed = {r.check: r for r in preflight.check_existing_vpc_endpoints(settings, aws) if r.status == "fail"}
    assert set(failed) == {"endpoint s3", "endpoint ecr.dkr"}
    assert failed["endpoint s3"].action == "set network.existing_vpc.s3_gateway_endpoint to false"
    assert failed["endpoint ecr.dkr"].action == "list network.interface_endpoints without ecr.dkr"


def _describe_type_client(region: str, types: list[str], absent: set[str] = frozenset()):
    """CloudFormation's DescribeType in its real shapes (botocore's Stubber checks both the
    request and the answer against the cloudformation model): a live type, or its
    TypeNotFoundException (an error the model lists for DescribeType)."""
    client = boto3.client("cloudformation", region_name=region, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for name in types:
        params = {"Type": "RESOURCE", "TypeName": name}
        if name in absent:
            stub.add_client_error("describe_type", "TypeNotFoundException", f"The type '{name}' cannot be found.", 404, expected_params=params)
        else:
            stub.add_response("describe_type", {"Type": "RESOURCE", "TypeName": name, "DeprecatedStatus": "LIVE",
                                                "ProvisioningType": "FULLY_MUTABLE", "Visibility": "PUBLIC"}, params)
    stub.activate()
    return client, stub


def test_each_type_the_region_lists_may_lack_is_asked_of_the_accounts_cloudformation():
    # validate only warns where cfn-lint's region list lacks a type (us-west-2: ClusterSchedulerConfig);
    # the region's CloudFormation answers, and its answer decides.
    from infra import cfn_schema

    region, zones = "us-west-2", ["us-west-2a", "us-west-2b", "us-west-2c"]
    s = _settings({"region": region, "availability_zones": zones,
                   "network": {"hyperpod_subnets": [{"availability_zone": zones[0], "cidr": "10.1.0.0/16"}]}}, env="prod")
    types = s.regional_resource_types
    assert [t for t in types if not cfn_schema.region_has(region, t)] == ["AWS::SageMaker::ClusterSchedulerConfig"]
    client, stub = _describe_type_client(region, types)
    results = preflight.check_resource_types(s, preflight.Clients(None, region, {"cloudformation": client}))
    stub.assert_no_pending_responses()
    assert [(r.check, r.status) for r in results] == [(f"type {t}", "pass") for t in types]
    client, _ = _describe_type_client(region, types, absent={"AWS::SageMaker::ComputeQuota"})
    failed = [r for r in preflight.check_resource_types(s, preflight.Clients(None, region, {"cloudformation": client})) if r.status == "fail"]
    assert [(r.check, r.detail) for r in failed] == [("type AWS::SageMaker::ComputeQuota", "CloudFormation in us-west-2 does not offer it")]


def _published_client(published: dict[str, list[str]]):
    """EKS's DescribeAddonVersions without a Kubernetes version, in the installed botocore model's shape
    (the Stubber checks request and answer against it): each add-on with one build per cluster version."""
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for name, kubernetes in sorted(published.items()):
        builds = [{"addonVersion": "v1.2.1-eksbuild.1", "compatibilities": [{"clusterVersion": k, "defaultVersion": True} for k in kubernetes]}]
        stub.add_response("describe_addon_versions", {"addons": [{"addonName": name, "addonVersions": builds}]}, {"addonName": name})
    stub.activate()
    return client


def test_preflight_says_when_every_hyperpod_addon_is_published_for_a_newer_kubernetes():
    settings = _settings(env="prod")  # training operator and task governance, both HyperPod add-ons
    names = [n for n in preflight.account._addons_to_create(settings) if n.startswith("amazon-sagemaker-hyperpod-")]
    assert {"amazon-sagemaker-hyperpod-training-operator", "amazon-sagemaker-hyperpod-taskgovernance"} <= set(names)
    both = {n: ["1.33", "1.34", "1.35"] for n in names}
    (line,) = preflight.check_newer_kubernetes(settings, preflight.Clients(None, REGION, {"eks": _published_client(both)}))
    assert line.status == "warn" and "published for Kubernetes 1.35" in line.detail and "does not document yet" in line.detail
    assert "upgrade-plan --to 1.35" in line.action
    # One add-on behind holds the whole cluster back.
    behind = {**both, names[0]: ["1.33", "1.34"]}
    (line,) = preflight.check_newer_kubernetes(settings, preflight.Clients(None, REGION, {"eks": _published_client(behind)}))
    assert line.status == "pass" and "no version newer than 1.34" in line.detail


# ------------------------------------------------------------------ reserved capacity

PLAN = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/research"
START = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)


def _planned(patch_group: dict | None = None):
    group = {"name": "gpu", "instance_type": "ml.p5.48xlarge", "count": 2, "training_plan_arn": PLAN, **(patch_group or {})}
    return _settings({"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}, group]},
                      "governance": {"teams": []}, "sample_job": {"enabled": False}})


def _capacity_account(plan: dict | None, zones: dict[str, str], reservations: list[dict] = ()):
    """SageMaker's DescribeTrainingPlan and ListCapacityReservations, EC2's DescribeAvailabilityZones, in the installed
    botocore models' shapes (the Stubbers check both sides)."""
    sagemaker = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    sm, ec = Stubber(sagemaker), Stubber(ec2)
    if plan is not None:
        sm.add_response("describe_training_plan", {"TrainingPlanArn": PLAN, "TrainingPlanName": "research", **plan},
                        {"TrainingPlanName": "research"})
    sm.add_response("list_capacity_reservations", {"CapacityReservationSummaries": list(reservations)}, {})
    ec.add_response("describe_availability_zones", {"AvailabilityZones": [
        {"ZoneName": name, "ZoneId": zone_id, "RegionName": REGION, "State": "available"} for name, zone_id in zones.items()]}, {})
    for stub in (sm, ec):
        stub.activate()
    return preflight.Clients(None, REGION, {"sagemaker": sagemaker, "ec2": ec2})


def _capacity(zone_id: str, status="Active", itype="ml.p5.48xlarge", count=2) -> dict:
    return {"Status": status, "ReservedCapacitySummaries": [{
        "ReservedCapacityArn": "arn:aws:sagemaker:us-east-1:111111111111:reserved-capacity/rc-0123456789", "InstanceType": itype,
        "TotalInstanceCount": count, "Status": status, "AvailabilityZone": "us-east-1a", "AvailabilityZoneId": zone_id}]}


def test_a_training_plan_in_another_zone_id_than_the_groups_zone_fails():
    # DescribeTrainingPlan gives the zone as an ID (ReservedCapacitySummary.AvailabilityZoneId); names map to IDs per
    # account (DescribeAvailabilityZones), so the plan's own AvailabilityZone name is not compared.
    settings = _planned()
    zone = settings.network.hyperpod_subnets[0].availability_zone
    aws = _capacity_account(_capacity("use1-az4"), {zone: "use1-az6"})
    (line,) = preflight.check_training_plans(settings, aws)
    assert line.status == "fail" and "zone ID use1-az4" in line.detail and f"{zone}, which is use1-az6 in this account" in line.detail
    aws = _capacity_account(_capacity("use1-az6"), {zone: "use1-az6"})
    (line,) = preflight.check_training_plans(settings, aws)
    assert line.status == "pass" and "2 ml.p5.48xlarge" in line.detail


@pytest.mark.parametrize("plan, says", [
    (_capacity("use1-az6", status="Expired"), "is Expired"),
    (_capacity("use1-az6", itype="ml.p4d.24xlarge"), "reserves ml.p4d.24xlarge, not ml.p5.48xlarge"),
])
def test_an_expired_plan_or_one_of_another_type_fails(plan, says):
    settings = _planned()
    aws = _capacity_account(plan, {settings.network.hyperpod_subnets[0].availability_zone: "use1-az6"})
    (line,) = preflight.check_training_plans(settings, aws)
    assert line.status == "fail" and says in line.detail
    # The plan statuses preflight takes as usable are the API's (botocore's sagemaker model).
    import botocore.session

    statuses = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingPlanStatus").enum
    assert set(preflight.capacity.USABLE_PLAN) <= set(statuses)


def test_the_accounts_capacity_reservations_of_the_configs_types_are_named_as_shared_by_every_cluster():
    settings = _planned()
    reservation = {"SMCapacityReservationArn": "arn:aws:sagemaker:us-east-1:111111111111:capacity-reservation/cr-0123456789",
                   "SMCapacityReservationId": "cr-0123456789", "Status": "Active", "InstanceType": "ml.p5.48xlarge",
                   "AvailabilityZoneId": "use1-az6", "TotalInstanceCount": 4, "StartTime": START, "EndTime": START,
                   "Owner": "111111111111", "CreationTime": START}
    other = {**reservation, "SMCapacityReservationId": "cr-other", "InstanceType": "ml.trn1.32xlarge"}
    aws = _capacity_account(None, {"us-east-1a": "use1-az6"}, [reservation, other])
    (line,) = preflight.check_capacity_reservations(settings, aws)
    assert line.check == "capacity reservation cr-0123456789" and "4 ml.p5.48xlarge in us-east-1a (use1-az6)" in line.detail
    assert "every HyperPod cluster of the account" in line.detail
