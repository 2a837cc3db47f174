"""Network stack: what a reviewer checks on the VPC, the HyperPod subnet and the EFA group."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from tests.conftest import ENVIRONMENTS


def _subnets(s):
    return s.resources("network", "AWS::EC2::Subnet").values()


def test_vpc_has_the_configured_cidr_and_a_secondary_block_for_hyperpod(synth):
    s = synth("dev")
    t = s.template("network")
    t.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.192.0.0/16"})
    t.has_resource_properties("AWS::EC2::VPCCidrBlock", {"CidrBlock": "10.1.0.0/16"})


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_eks_private_subnets_span_at_least_two_configured_zones(synth, env):
    s = synth(env)
    private = [sn for sn in _subnets(s) if any(t["Key"] == "aws-cdk:subnet-type" and t["Value"] == "Private" for t in sn["Properties"].get("Tags", []))]
    zones = {sn["Properties"]["AvailabilityZone"] for sn in private}
    assert len(zones) >= 2 and zones <= set(s.settings.availability_zones)


def test_hyperpod_subnet_is_large_and_in_the_gpu_zone(synth):
    s = synth("dev")
    s.template("network").has_resource_properties(
        "AWS::EC2::Subnet",
        {"AvailabilityZone": "us-east-1a", "CidrBlock": "10.1.0.0/16", "MapPublicIpOnLaunch": False},
    )


def test_no_subnet_assigns_public_ips(synth):
    for sn in _subnets(synth("dev")):
        assert sn["Properties"].get("MapPublicIpOnLaunch") is False


@pytest.mark.parametrize("env, expected", [("dev", 1), ("prod", 3)])
def test_nat_gateways_one_in_dev_one_per_zone_in_prod(synth, env, expected):
    assert len(synth(env).resources("network", "AWS::EC2::NatGateway")) == expected


def test_hyperpod_subnet_routes_to_a_nat_gateway(synth):
    s = synth("dev")
    t = s.templates["network"]["Resources"]
    (hp_route,) = [r for k, r in t.items() if r["Type"] == "AWS::EC2::Route" and k.startswith("HyperPodSubnet")]
    assert hp_route["Properties"]["DestinationCidrBlock"] == "0.0.0.0/0"
    assert "NatGatewayId" in hp_route["Properties"]


def test_s3_gateway_endpoint_serves_the_hyperpod_subnet(synth):
    s = synth("dev")
    t = s.templates["network"]["Resources"]
    (endpoint,) = [r for r in t.values() if r["Type"] == "AWS::EC2::VPCEndpoint"]
    assert endpoint["Properties"]["VpcEndpointType"] == "Gateway"
    hp_table = [k for k, r in t.items() if r["Type"] == "AWS::EC2::RouteTable" and k.startswith("HyperPodSubnet")]
    assert {"Ref": hp_table[0]} in endpoint["Properties"]["RouteTableIds"]


def test_flow_logs_capture_all_traffic_into_an_encrypted_log_group_with_retention(synth):
    s = synth("dev")
    t = s.template("network")
    t.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"})
    t.has_resource_properties(
        "AWS::Logs::LogGroup",
        {"KmsKeyId": Match.any_value(), "RetentionInDays": s.settings.protection.log_retention_days},
    )
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_efa_security_group_allows_all_traffic_to_and_from_itself_only(synth):
    s = synth("dev")
    t = s.templates["network"]["Resources"]
    (sg_id,) = [k for k, r in t.items() if r["Type"] == "AWS::EC2::SecurityGroup" and k.startswith("EfaSecurityGroup")]
    self_ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    ingress = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    egress = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    assert {"IpProtocol": "-1", "SourceSecurityGroupId": self_ref} in [
        {k: v for k, v in i.items() if k in ("IpProtocol", "SourceSecurityGroupId")} for i in ingress
    ]
    assert any(e["IpProtocol"] == "-1" and e.get("DestinationSecurityGroupId") == self_ref for e in egress)
    # nothing from outside the group may reach the nodes
    assert all("CidrIp" not in i for i in ingress if i.get("GroupId") == self_ref)
    inline = t[sg_id]["Properties"]
    assert not inline.get("SecurityGroupIngress")


def test_prod_has_interface_endpoints_for_sagemaker_and_eks_auth(synth):
    endpoints = synth("prod").resources("network", "AWS::EC2::VPCEndpoint").values()
    services = [str(e["Properties"]["ServiceName"]) for e in endpoints if e["Properties"].get("VpcEndpointType") == "Interface"]
    assert any("sagemaker.api" in s for s in services) and any("eks-auth" in s for s in services)


def test_existing_vpc_is_imported_without_creating_a_vpc(synth):
    s = synth("dev", EXISTING_VPC)
    assert not s.resources("network", "AWS::EC2::VPC")
    assert not s.resources("network", "AWS::EC2::Subnet")
    s.template("network").has_resource_properties(
        "AWS::EC2::SecurityGroup", {"VpcId": "vpc-0123456789abcdef0"}
    )


EXISTING_VPC = {
    "network": {
        "existing_vpc": {
            "vpc_id": "vpc-0123456789abcdef0",
            "vpc_cidr": "10.50.0.0/16",
            "private_subnet_ids": ["subnet-0a000000000000001", "subnet-0a000000000000002", "subnet-0a000000000000003"],
            "private_subnet_route_table_ids": ["rtb-0a000000000000001", "rtb-0a000000000000002", "rtb-0a000000000000003"],
        },
        "hyperpod_subnets": [{"availability_zone": "us-east-1a", "subnet_id": "subnet-0b000000000000001",
                              "route_table_id": "rtb-0b000000000000001"}],
    },
    "eks": {
        "authentication_mode": "API_AND_CONFIG_MAP",
        "admin_principal_arns": ["arn:aws:iam::111111111111:role/PlatformAdmin"],
    },
}


def test_an_existing_vpc_gets_the_s3_gateway_endpoint_on_its_route_tables_unless_it_has_one(synth):
    # Lifecycle scripts, checkpoints and ECR image layers are S3 traffic (ECR serves layers from
    # S3: its VPC-endpoint page requires the S3 gateway endpoint for pulls without a NAT).
    s = synth("existing-vpc")
    (endpoint,) = [r["Properties"] for r in s.resources("network", "AWS::EC2::VPCEndpoint").values()
                   if r["Properties"].get("VpcEndpointType", "Gateway") == "Gateway"]
    ev = s.settings.network.existing_vpc
    wanted = {*ev.private_subnet_route_table_ids, *(sn.route_table_id for sn in s.settings.network.hyperpod_subnets)}
    assert set(endpoint["RouteTableIds"]) == wanted
    from infra import config, validation
    from tests.conftest import CAPABILITIES, patched_context

    off = config.deep_merge(CAPABILITIES["existing-vpc"], {"network": {"existing_vpc": {"s3_gateway_endpoint": False},
                                                                       "hyperpod_subnets": [{"availability_zone": "us-east-1a", "subnet_id": "subnet-0a1b2c3d4e5f60714"}]}})
    settings, _ = validation.load_settings(patched_context("dev", off), "dev")  # no route table needed then
    assert not settings.network.existing_vpc.s3_gateway_endpoint


def test_interface_endpoints_can_be_chosen_one_by_one(synth):
    from infra import config, validation
    from tests.conftest import patched_context

    settings, _ = validation.load_settings(patched_context("dev", {"network": {"interface_endpoints": ["sagemaker.api", "ecr.dkr"]}}), "dev")
    assert settings.network.endpoint_services == ("sagemaker.api", "ecr.dkr")
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", {"network": {"interface_endpoints": ["sagemaker.runtime"]}}), "dev")
    assert any(p.startswith("dev: network.interface_endpoints[0]: 'sagemaker.runtime' is not a service the platform calls") for p in err.value.problems)
