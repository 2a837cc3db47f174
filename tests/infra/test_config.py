"""The config contract: what cdk.json may say, and the one-line errors when it is wrong."""

from __future__ import annotations

import importlib

import pytest
from pydantic import ValidationError

import json

from infra import config, validation, versions
from tests.conftest import CONTEXT, ENVIRONMENTS, ROOT, patched_context


def load(patch: dict | None = None, env: str = "dev"):
    return validation.load_settings(patched_context(env, patch) if patch else CONTEXT, env)


def problems(patch: dict, env: str = "dev") -> list[str]:
    with pytest.raises(config.ConfigError) as exc:
        load(patch, env)
    return exc.value.problems


def test_dev_and_prod_exist_and_dev_is_the_default():
    assert {"dev", "prod"} <= set(ENVIRONMENTS)
    settings, _ = validation.load_settings(CONTEXT, None)
    assert settings.env_name == "dev"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_environment_in_cdk_json_is_valid(env):
    settings, _ = validation.load_settings(CONTEXT, env)
    assert settings.eks.version == versions.DEFAULT_EKS_VERSION


def test_environment_block_is_deep_merged_over_defaults():
    prod, _ = validation.load_settings(CONTEXT, "prod")
    # from defaults, untouched by prod's network block
    assert str(prod.network.vpc_cidr) == CONTEXT["defaults"]["network"]["vpc_cidr"]
    assert prod.region == CONTEXT["defaults"]["region"]
    # prod's own values
    assert prod.network.nat_gateways == 3
    assert prod.network.interface_endpoints is True
    # lists replace rather than merge
    assert [g.instance_type for g in prod.hyperpod.instance_groups] == ["ml.m5.8xlarge", "ml.p5.48xlarge"]


def test_prod_is_four_p5_with_topology_and_protection():
    prod, _ = validation.load_settings(CONTEXT, "prod")
    assert prod.capacity()["ml.p5.48xlarge"] == 4
    assert prod.topology.mode == "required"
    assert prod.protection.termination_protection and prod.protection.retain_data


def test_settings_are_immutable():
    settings, _ = load()
    with pytest.raises(ValidationError):
        settings.region = "eu-west-1"


def test_unknown_environment_lists_the_valid_ones():
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(CONTEXT, "staging")
    (line,) = exc.value.problems
    assert "'staging'" in line and "dev" in line and "prod" in line


@pytest.mark.parametrize(
    "patch, path",
    [
        ({"typo_field": 1}, "typo_field"),
        ({"network": {"nat_gateway": 2}}, "network.nat_gateway"),
        ({"eks": {"endpoint": "private"}}, "eks.endpoint"),
        ({"hyperpod": {"instance_groups": [{"name": "a", "instance_type": "ml.m5.4xlarge", "count": 1, "cnt": 2}]}},
         "hyperpod.instance_groups[0].cnt"),
    ],
)
def test_unknown_field_is_an_error_naming_its_path_and_the_allowed_keys(patch, path):
    (line,) = [p for p in problems(patch) if path in p]
    assert line.startswith(f"dev: {path}: unknown field;") and " allowed here: " in line


@pytest.mark.parametrize("patch, path, meant", [
    ({"network": {"nat_gateway": 2}}, "network.nat_gateway", "nat_gateways"),
    ({"eks": {"endpoint": "private"}}, "eks.endpoint", "endpoint_access"),
    ({"hyperpod": {"node_recovry": "None"}}, "hyperpod.node_recovry", "node_recovery"),
])
def test_a_misspelt_field_gets_the_field_it_reads_like(patch, path, meant):
    (line,) = [p for p in problems(patch) if path in p]
    assert line.startswith(f"dev: {path}: unknown field; did you mean {meant}? allowed here: ")


def test_an_unknown_field_like_no_field_gets_no_guess():
    (line,) = problems({"typo_field": 1})
    assert "did you mean" not in line


def test_a_misspelt_instance_type_is_one_line_not_one_per_team_quota_of_the_type_it_meant():
    from tests.conftest import patched_context

    groups = [{"name": "system", "instance_type": "ml.m5.8xlarge", "count": 2},
              {"name": "gpu", "instance_type": "ml.p5.48xlarg", "count": 4, "ebs_volume_gb": 1000}]
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("prod", {"hyperpod": {"instance_groups": groups}}), "prod")
    (line,) = err.value.problems  # prod's two teams' quotas and borrow limit name ml.p5.48xlarge: they follow from it
    assert line.startswith("prod: hyperpod.instance_groups[1].instance_type: 'ml.p5.48xlarg' is not a type") and "did you mean ml.p5.48xlarge" in line


def test_unknown_nested_field_lists_allowed_keys_of_that_model():
    (line,) = problems({"network": {"nat_gateway": 2}})
    assert "nat_gateways" in line and "vpc_cidr" in line


@pytest.mark.parametrize("version", ["1.27", "1.20", "1.37"])
def test_eks_version_outside_1_28_to_1_36_is_refused(version):
    (line,) = problems({"eks": {"version": version}})
    assert line.startswith(f"dev: eks.version: '{version}'") and "1.28 to 1.36" in line


@pytest.mark.parametrize("minor", range(versions.MIN_EKS_VERSION[1], versions.MAX_EKS_VERSION[1] + 1))
def test_every_accepted_version_has_its_kubectl_layer_installed(minor):
    version = f"1.{minor}"
    assert load({"eks": {"version": version}})[0].eks.version == version  # accepted, no error
    module, cls, _ = versions.kubectl_layer_module(version)
    assert hasattr(importlib.import_module(module), cls)


def test_versions_outside_a_range_warn_with_the_component_its_source_and_when_it_was_read():
    beyond = versions.support_warnings("1.35")
    assert any("SageMaker HyperPod" in w and "1.28-1.34" in w and "source:" in w and "read 2026-12" in w for w in beyond)
    assert not [w for w in beyond if "standard support" in w or "training operator" in w]
    assert any("training operator" in w and "1.28-1.35" in w for w in versions.support_warnings("1.36"))
    assert any("EKS standard support" in w for w in versions.support_warnings("1.34"))


def test_the_default_version_is_documented_by_hyperpod_and_every_addon():
    # HyperPod's EKS prerequisites page in its newer copy (1.28-1.34, the zh_cn translation; the
    # older English copy says 1.28-1.33) and the training operator add-on's published range
    # (1.28-1.35, awsome PR 1076); the quick setup's eks-template.yaml defaults to 1.34 too.
    default = versions.parse(versions.DEFAULT_EKS_VERSION)
    assert default == (1, 34)
    assert all(r.oldest <= default <= r.newest for r in versions.COMPONENT_RANGES)
    _, warnings = load()
    assert not any("outside the documented range" in w for w in warnings)
    assert "1.28-1.33" in versions.COMPONENT_RANGES[0].source  # the older copy is cited beside the newer
    # The default moves the day a source names a newer version for every component (preflight's "newer
    # Kubernetes" line says when the account publishes every HyperPod add-on for one): it is the newest they all cover.
    assert default == min(r.newest for r in versions.COMPONENT_RANGES)


def test_malformed_cidr_is_reported_with_its_value():
    lines = problems({"network": {"vpc_cidr": "10.192.0/16"}})
    assert any(line.startswith("dev: network.vpc_cidr: '10.192.0/16' is invalid") for line in lines)


def test_the_one_bad_item_of_a_list_that_needs_one_is_one_line():
    # pydantic also reports the tuple as too short, counting only the items that passed: the
    # item's own line says the problem, and the second line would name a list the config fills.
    context = patched_context("dev", {})
    context["environments"]["dev"]["hyperpod"]["instance_groups"] = [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": "x"}]
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(context, "dev")
    assert err.value.problems == ["dev: hyperpod.instance_groups[0].count: 'x' is invalid: Input should be a valid integer"]
    # An empty list is still too short, in its own line.
    context["environments"]["dev"]["hyperpod"]["instance_groups"] = []
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(context, "dev")
    assert [p for p in err.value.problems if "at least 1 item" in p] == ["dev: hyperpod.instance_groups: [] is invalid: Tuple should have at least 1 item after validation, not 0"]


def test_hyperpod_subnet_outside_the_vpc_cidrs_is_refused():
    lines = problems({"network": {"hyperpod_subnets": [{"availability_zone": "us-east-1a", "cidr": "172.16.0.0/16"}]}})
    assert any("network.hyperpod_subnets[0].cidr: '172.16.0.0/16' is outside the VPC CIDRs" in line for line in lines)


def test_hyperpod_subnet_overlapping_the_allocated_eks_subnets_is_refused():
    lines = problems(
        {"network": {"hyperpod_subnets": [{"availability_zone": "us-east-1a", "cidr": "10.192.0.0/20"}]}}
    )
    assert any("overlaps the EKS/public subnet" in line for line in lines)


def test_vpc_too_small_for_its_subnets_is_refused():
    lines = problems({"network": {"vpc_cidr": "10.192.0.0/20"}})
    assert any(line.startswith("dev: network.vpc_cidr: '10.192.0.0/20' is too small") for line in lines)


def test_secondary_cidr_overlapping_the_primary_is_refused():
    lines = problems({"network": {"secondary_cidrs": ["10.192.128.0/17"], "hyperpod_subnets": [
        {"availability_zone": "us-east-1a", "cidr": "10.192.128.0/17"}]}})
    assert any("network.secondary_cidrs[0]" in line and "overlaps network.vpc_cidr" in line for line in lines)


def test_a_type_missing_from_cfn_lints_region_list_is_a_warning_that_names_preflight():
    # cfn-lint's per-region provider schemas, read here as files: a snapshot in which us-west-2
    # lacks ClusterSchedulerConfig and ap-northeast-1 ComputeQuota, though task governance ships
    # both together. Availability is the account's answer (preflight, DescribeType), never a refusal.
    import importlib.util
    from pathlib import Path

    providers = Path(next(iter(importlib.util.find_spec("cfnlint").submodule_search_locations))) / "data" / "schemas" / "providers"
    for region in ("us-west-2", "us-east-2", "eu-west-1", "ap-northeast-1"):
        listed = (providers / f"{region}.json").read_text()
        missing = [t for t in ("AWS::SageMaker::ClusterSchedulerConfig", "AWS::SageMaker::ComputeQuota") if f'"{t}"' not in listed]
        assert missing, region  # the snapshot this test is about; once cfn-lint lists both, nothing is said
        zones = [f"{region}{z}" for z in "abc"]
        patch = {"region": region, "availability_zones": zones,
                 "network": {"hyperpod_subnets": [{"availability_zone": zones[0], "cidr": "10.1.0.0/16"}]}}
        for env in ("dev", "prod"):
            settings, warnings = validation.load_settings(patched_context(env, patch), env)
            assert [w for w in warnings if w.startswith(f"{env}: region:")] == [
                f"{env}: region: {region} is missing {', '.join(missing)} in cfn-lint's region list, an offline snapshot that lags "
                "CloudFormation; `hyperpod-cdk preflight` asks the account's CloudFormation (DescribeType)"]
            assert set(missing) <= set(settings.regional_resource_types)
    # A region CloudFormation does not have at all is still refused.
    assert any(l.startswith("dev: region: 'xx-east-1' is not an AWS region") for l in problems({"region": "xx-east-1"}))


def test_a_team_name_breaking_the_name_rule_is_one_line():
    # Its compute-quota name is made of it: no second line about that name (which is 28 characters).
    import copy

    teams = copy.deepcopy(config.merged_environment(CONTEXT, "prod")["governance"]["teams"])
    teams[0]["name"] = "Search_Ranking"
    lines = problems({"governance": {"teams": teams}}, "prod")
    assert [l for l in lines if l.startswith("prod: governance.teams[0].name:")] == [
        "prod: governance.teams[0].name: 'Search_Ranking' must be lowercase letters, digits and hyphens, short enough that "
        "'hyperpod-ns-Search_Ranking-clusterqueue' is at most 63 characters"
    ], lines


def test_a_principal_of_another_account_is_taken_with_a_warning():
    # EKS user guide, Create access entries: a STANDARD entry may name another account's principal;
    # the example's ARNs left behind in a config of another account are said, not refused.
    settings, warnings = validation.load_settings(patched_context("prod", {"account": "222222222222"}), "prod")
    assert settings.eks.admin_principal_arns == ("arn:aws:iam::111111111111:role/Admin",)
    assert [w.split(":", 2)[1].strip() for w in warnings if "not 222222222222, the account this deploys to" in w] == [
        "eks.admin_principal_arns[0]", "governance.teams[0].principals[0]", "governance.teams[1].principals[0]"]
    assert not [w for w in validation.load_settings(CONTEXT, "prod")[1] if "the account this deploys to" in w]
    # A role a service runs as must be of the account: refused, in its one line, no warning beside it.
    from tests.conftest import CAPABILITIES

    patch = config.deep_merge(CAPABILITIES["existing-cluster"], {"eks": {"existing_cluster": {"kubectl_role_arn": "arn:aws:iam::222222222222:role/k"}}})
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", patch), "dev")
    assert [l for l in err.value.problems + err.value.warnings if "kubectl_role_arn" in l] == [
        "dev: eks.existing_cluster.kubectl_role_arn: 'arn:aws:iam::222222222222:role/k' must be a role of account 111111111111 in "
        "partition aws: the kubectl Lambda runs as it"]


def test_availability_zone_of_another_region_is_refused():
    lines = problems({"availability_zones": ["us-east-1a", "eu-west-1b"]})
    assert any(line.startswith("dev: availability_zones[1]: 'eu-west-1b' must be a zone of region us-east-1") for line in lines)


def test_more_nat_gateways_than_zones_is_refused():
    lines = problems({"network": {"nat_gateways": 4}})
    assert any("network.nat_gateways: 4 must be at most the number of AZs (3)" in line for line in lines)


def test_prefix_breaking_the_stack_name_pattern_is_refused():
    lines = problems({"prefix": "Hyper_Pod"})
    assert any(line.startswith("dev: prefix: 'Hyper_Pod' is invalid") for line in lines)


def test_hyperpod_cluster_name_too_long_is_refused():
    lines = problems({"hyperpod": {"cluster_name": "h" * 64}})
    assert any(line.startswith("dev: hyperpod.cluster_name:") and "1-63" in line for line in lines)


def test_duplicate_instance_group_names_are_refused():
    group = {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1}
    lines = problems({"hyperpod": {"instance_groups": [group, group]}})
    assert any("hyperpod.instance_groups: 'gpu' is used by two groups" in line for line in lines)


def test_duplicate_admin_principals_are_refused():
    arn = "arn:aws:iam::111111111111:role/Admin"
    lines = problems({"eks": {"admin_principal_arns": [arn, arn]}})
    assert any("eks.admin_principal_arns" in line and "listed twice" in line for line in lines)


def test_every_problem_is_reported_not_just_the_first():
    lines = problems({"network": {"nat_gateways": 5}, "hyperpod": {"cluster_name": "-bad-"}})
    assert len(lines) >= 2


def test_existing_vpc_needs_subnet_ids_not_cidrs():
    lines = problems({"network": {"existing_vpc": {
        "vpc_id": "vpc-0123456789abcdef0", "vpc_cidr": "10.50.0.0/16",
        "private_subnet_ids": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1", "subnet-0123456789abcdef2"],
        "private_subnet_route_table_ids": ["rtb-0123456789abcdef0", "rtb-0123456789abcdef1", "rtb-0123456789abcdef2"]}}})
    assert any("network.hyperpod_subnets[0]" in line and "needs subnet_id" in line for line in lines)


def test_private_endpoint_with_public_cidrs_is_refused():
    lines = problems({"eks": {"endpoint_access": "private", "public_access_cidrs": ["203.0.113.0/24"]}})
    assert any(line.startswith("dev: eks.public_access_cidrs:") for line in lines)


# ---------------------------------------------------------------- one reader, no jsii


def test_validate_starts_no_jsii_and_answers_within_a_second_and_a_half():
    import subprocess
    import sys

    code = (
        "import sys, time; t = time.perf_counter(); from cli import main as cli; rc = cli.main(['validate', '--all']); "
        "print(rc, time.perf_counter() - t, any(m in sys.modules for m in ('jsii', 'aws_cdk', 'constructs')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rc, seconds, jsii = out.splitlines()[-1].split()
    rc, seconds, jsii = int(rc), float(seconds), jsii == "True"
    assert rc == 0 and not jsii and seconds < 1.5


def test_the_context_is_read_as_the_cdk_cli_passes_it(tmp_path):
    overflow = tmp_path / "context-overflow.json"
    overflow.write_text(json.dumps({"environments": {"dev": {"sample_job": {"priority": None}}}}))
    context = config.context_from_cdk_cli(
        {"CDK_CONTEXT_JSON": json.dumps({"env": "dev", "defaults": {"x": 1}}), "CONTEXT_OVERFLOW_LOCATION_ENV": str(overflow)}
    )
    # nulls survive, as in cdk.json (the CDK library would drop them)
    assert context == {"env": "dev", "defaults": {"x": 1}, "environments": {"dev": {"sample_job": {"priority": None}}}}


def test_null_means_no_value_not_the_default():
    settings, _ = validation.load_settings(patched_context("dev", {"sample_job": {"priority": None}}), "dev")
    assert settings.sample_job.priority is None  # the defaults block says "training"


@pytest.mark.parametrize(
    "patch, starts",
    [
        ({"addons": {"observability": {"enabled": True, "grafana": {"enabled": True}}}},
         "addons.observability.grafana.authentication_providers: AWS_SSO needs IAM Identity Center"),
        ({"topology": {"mode": "preferred", "level": "topology.k8s.aws/ultraserver-id"}},
         "topology.level: topology.k8s.aws/ultraserver-id is preferred but ml.g5.8xlarge"),
        ({"sample_job": {"checkpoint_interval_steps": 500}}, "sample_job.checkpoint_interval_steps: 500 is more than max_steps (200)"),
        # 64 - 5 = 59 usable; 1 + 110 for the m5.4xlarge (16 vCPUs), 1 + 250 for the g5.8xlarge (32 vCPUs)
        ({"network": {"hyperpod_subnets": [{"availability_zone": "us-east-1a", "cidr": "10.1.0.0/26"}]}},
         "network.hyperpod_subnets[0].cidr: 10.1.0.0/26 has 59 usable addresses; its 2 nodes at EKS's max-pods density need 362"),
    ],
)
def test_legal_values_that_need_something_else_are_warnings(patch, starts):
    _, warnings = validation.load_settings(patched_context("dev", patch), "dev")
    assert any(w.startswith(f"dev: {starts}") for w in warnings), warnings


@pytest.mark.parametrize("key, reserved", [
    # Kubernetes docs, Labels and Selectors: "The kubernetes.io/ and k8s.io/ prefixes are reserved for
    # Kubernetes core components"; node.kubernetes.io/not-ready and unreachable are the node lifecycle
    # controller's taints (Well-Known Labels, Annotations and Taints).
    ("node.kubernetes.io/not-ready", True), ("node-role.kubernetes.io/gpu", True), ("kubernetes.io/gpu", True),
    ("example.k8s.io/x", True), ("nvidia.com/gpu", False), ("dedicated", False), ("mykubernetes.io/x", False),
])
def test_a_taint_key_under_a_prefix_kubernetes_reserves_is_refused(key, reserved):
    groups = [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
              {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1, "taints": [{"key": key, "effect": "NoSchedule"}]}]
    patch = {"hyperpod": {"instance_groups": groups}}
    if reserved:
        assert any(l.startswith(f"dev: hyperpod.instance_groups[1].taints[0].key: {key!r} has a prefix Kubernetes reserves")
                   for l in problems(patch))
    else:
        load(patch)


def test_a_volume_key_of_another_partition_is_blamed_on_its_partition_not_its_region():
    # botocore's partition of the region (naming.partition) against the ARN's own.
    key = "1234abcd-12ab-34cd-56ef-1234567890ab"
    base = {"hyperpod": {"continuous_provisioning": True, "volume_encryption": {"kms_key_arn": f"arn:aws-cn:kms:us-east-1:111111111111:key/{key}"}}}
    (line,) = [l for l in problems(base) if "kms_key_arn" in l]
    assert "is a key of partition aws-cn; us-east-1 is in partition aws" in line and "is in us-east-1" not in line
    base["hyperpod"]["volume_encryption"]["kms_key_arn"] = f"arn:aws:kms:us-west-2:111111111111:key/{key}"
    (line,) = [l for l in problems(base) if "kms_key_arn" in l]
    assert "is in us-west-2; EBS volumes in us-east-1 take a key of that region" in line
