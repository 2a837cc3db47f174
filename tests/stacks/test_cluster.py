"""Cluster stack: the EKS control plane properties a reviewer signs off."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from infra import config, validation
from tests.conftest import ENVIRONMENTS, patched_context
from tests.stacks.test_network import EXISTING_VPC


def _cluster(s):
    (cluster,) = s.resources("cluster", "AWS::EKS::Cluster").values()
    return cluster["Properties"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cluster_runs_the_configured_version_with_api_auth(synth, env):
    props = _cluster(synth(env))
    assert props["Version"] == "1.34"  # the newest version HyperPod and the training operator document
    assert props["AccessConfig"]["AuthenticationMode"] == "API"
    assert props["Name"] == f"hyperpod-{env}"


def test_api_and_config_map_mode_comes_from_config(synth):
    assert _cluster(synth("dev", EXISTING_VPC))["AccessConfig"]["AuthenticationMode"] == "API_AND_CONFIG_MAP"


def test_secrets_are_envelope_encrypted_with_a_rotating_key(synth):
    s = synth("dev")
    props = _cluster(s)
    assert props["EncryptionConfig"][0]["Resources"] == ["secrets"]
    key_ref = props["EncryptionConfig"][0]["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    assert s.templates["cluster"]["Resources"][key_ref]["Properties"]["EnableKeyRotation"] is True


def test_all_control_plane_log_types_go_to_a_log_group_with_retention(synth):
    s = synth("dev")
    enabled = _cluster(s)["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert sorted(t["Type"] for t in enabled) == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    s.template("cluster").has_resource_properties(
        "AWS::Logs::LogGroup", {"LogGroupName": "/aws/eks/hyperpod-dev/cluster", "RetentionInDays": 30}
    )


def test_dev_endpoint_is_public_and_private_prod_is_private_only(synth):
    dev = _cluster(synth("dev"))["ResourcesVpcConfig"]
    assert dev["EndpointPublicAccess"] and dev["EndpointPrivateAccess"]
    assert dev["PublicAccessCidrs"] == ["0.0.0.0/0"]
    prod = _cluster(synth("prod"))["ResourcesVpcConfig"]
    assert prod["EndpointPublicAccess"] is False and prod["EndpointPrivateAccess"] is True


def test_no_auto_mode_and_no_default_capacity(synth):
    s = synth("dev")
    props = _cluster(s)
    assert props["ComputeConfig"]["Enabled"] is False
    assert props["BootstrapSelfManagedAddons"] is False
    assert not s.resources("cluster", "AWS::EKS::Nodegroup")


def test_cluster_uses_the_private_eks_subnets_and_the_efa_group(synth):
    vpc_config = _cluster(synth("dev"))["ResourcesVpcConfig"]
    subnet_exports = [str(x) for x in vpc_config["SubnetIds"]]
    assert len(subnet_exports) == 3 and all("eksSubnet" in x for x in subnet_exports)
    assert "EfaSecurityGroup" in str(vpc_config["SecurityGroupIds"])


def test_core_addons_are_managed_eks_addons(synth):
    addons = {a["Properties"]["AddonName"] for a in synth("dev").resources("cluster", "AWS::EKS::Addon").values()}
    assert {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"} <= addons


def test_admin_principals_get_cluster_admin_access_entries(synth):
    entries = synth("dev", EXISTING_VPC).resources("cluster", "AWS::EKS::AccessEntry").values()
    (admin,) = [e["Properties"] for e in entries if e["Properties"]["PrincipalArn"] == EXISTING_VPC["eks"]["admin_principal_arns"][0]]
    (policy,) = admin["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in str(policy["PolicyArn"])


def test_kubectl_provider_runs_in_the_vpc_with_the_matching_kubectl_layer(synth):
    s = synth("dev")
    layers = s.resources("cluster", "AWS::Lambda::LayerVersion").values()
    assert any("kubectl" in str(l["Properties"].get("Description", "")).lower() for l in layers)
    handlers = [f["Properties"] for f in s.resources("cluster", "AWS::Lambda::Function").values() if "VpcConfig" in f["Properties"]]
    assert handlers


@pytest.mark.parametrize("env, protected", [("dev", False), ("prod", True)])
def test_stack_names_tags_and_termination_protection(synth, env, protected):
    s = synth(env)
    for suffix in ("network", "cluster"):
        tags = s.template(suffix)
        tags.has_resource_properties("AWS::EC2::SecurityGroup" if suffix == "network" else "AWS::KMS::Key", {
            "Tags": Match.array_with([{"Key": "environment", "Value": env}])
        })
    import json
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    for name in (f"hyperpod-{env}-network", f"hyperpod-{env}-cluster"):
        assert manifest["artifacts"][name]["properties"].get("terminationProtection", False) is protected


ENDPOINT_CASES = [
    (access, cidrs)
    for access in ("public", "private", "public_and_private")
    for cidrs in (None, [], ["0.0.0.0/0"], ["203.0.113.0/24"], ["10.0.0.0/8"])
]


@pytest.mark.parametrize("access, cidrs", ENDPOINT_CASES, ids=lambda v: str(v))
def test_every_endpoint_access_and_cidr_combination_builds_or_is_refused_in_one_line(synth, access, cidrs, capsys):
    # aws_eks_v2 throws "Cannot restrict public access to endpoint when private access is
    # disabled" (its EndpointAccess.onlyFrom); every documented value must get a line instead.
    import app

    patch = {"eks": {"endpoint_access": access, **({"public_access_cidrs": cidrs} if cidrs is not None else {})}}
    try:
        validation.load_settings(patched_context("dev", patch), "dev")
        refused = None
    except config.ConfigError as err:
        refused = err.problems
    if refused:
        assert all(p.startswith("dev: eks.") for p in refused) and len(refused) <= 2
        assert app.main({**patched_context("dev", patch), "env": "dev", "outdir": "/nonexistent"}) == 2
        assert "Traceback" not in capsys.readouterr().err
        return
    # What builds: the open list and the unset one are the same endpoint, and dev's own access is
    # public_and_private, so only what differs from dev is patched (the synthesis other tests share).
    key = {"eks": {**({"endpoint_access": access} if access != "public_and_private" else {}),
                   **({"public_access_cidrs": cidrs} if cidrs not in (None, ["0.0.0.0/0"], []) else {})}}
    vpc = _cluster(synth("dev", key if key["eks"] else None))["ResourcesVpcConfig"]
    assert vpc["EndpointPublicAccess"] is (access != "private")
    assert vpc["EndpointPrivateAccess"] is (access != "public")
    if access != "private":  # left out, EKS's default is 0.0.0.0/0 (VpcConfigRequest.publicAccessCidrs)
        assert vpc.get("PublicAccessCidrs", ["0.0.0.0/0"]) == (cidrs or ["0.0.0.0/0"])


def test_prod_refuses_deletion_and_every_cluster_states_its_support_tier(synth):
    # Both are AWS::EKS::Cluster properties that update in place (cfn-lint's schema: neither is create-only),
    # so a change is a deploy, not a replacement; EXTENDED is what EKS gives a cluster that names none.
    from infra import cfn_schema

    schema = cfn_schema.resource("AWS::EKS::Cluster")
    create_only = schema["createOnlyProperties"]
    assert not [p for p in create_only if p.startswith(("/properties/UpgradePolicy", "/properties/DeletionProtection"))]
    tiers = schema["definitions"]["UpgradePolicy"]["properties"]["SupportType"]["enum"]
    for env, protected in (("dev", False), ("prod", True)):
        props = _cluster(synth(env))
        assert props["UpgradePolicy"] == {"SupportType": "EXTENDED"} and "EXTENDED" in tiers
        assert props["DeletionProtection"] is protected, env
