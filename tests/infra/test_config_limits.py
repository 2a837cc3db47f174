"""Config limits are the services' own: each mapped field's limits are read from cfn-lint's
CloudFormation schemas or botocore's API models (infra/config/limits.py), not copied."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest

from infra import catalogue, config, naming, validation
from infra.config import limits
from infra.config.settings import ProtectionSettings

CORPUS = [json.loads(p.read_text()) for p in sorted((Path(__file__).resolve().parent.parent / "bad_inputs").glob("*.json"))]


@pytest.mark.parametrize("path", sorted(limits.FIELDS))
def test_every_mapped_field_still_has_limits_in_its_source(path):
    # A schema update that drops the property, or its limits, fails here rather than
    # silently loosening validation.
    assert limits.constraints(limits.FIELDS[path].source), limits.FIELDS[path].source


def test_every_mapped_path_is_a_config_field():
    fields = {p for p, _ in config.field_paths()}
    # A free-form mapping (an add-on's configuration values): a path may step into its keys.
    mappings = {p for p, default in config.field_paths() if default == {}}
    for path in limits.FIELDS:
        plain = path.replace("{}", "").replace("{=}", "").removesuffix("[]")
        assert (
            plain in fields or plain.replace("[]", "") in fields or plain.rsplit(".", 1)[0] + "[]." + plain.rsplit(".", 1)[1] in fields
            or any(plain.startswith(m + ".") for m in mappings)
        ), path


def test_an_alarm_name_is_held_to_the_stricter_of_the_schema_and_the_api():
    # The cluster schema's AlarmDetails.AlarmName allows 256 characters, the SageMaker API that
    # CloudFormation hands it to 255 (botocore's AlarmName; CloudWatch's own alarm names stop at
    # 255 too): the API's limit is the one held.
    schema = limits.constraints(limits.Cfn("AWS::SageMaker::Cluster", "InstanceGroups.[].ScheduledUpdateConfig.DeploymentConfig.AutoRollbackConfiguration.[].AlarmName"))
    api = limits.constraints(limits.FIELDS["hyperpod.instance_groups[].scheduled_update.rollback_alarms[]"].source)
    assert api["maxLength"] <= schema["maxLength"] and api["minLength"] == schema["minLength"] == 1
    assert limits.FIELDS["hyperpod.instance_groups[].auto_patch.rollback_alarms[]"].source == limits.FIELDS[
        "hyperpod.instance_groups[].scheduled_update.rollback_alarms[]"].source
    cloudwatch = limits._service_model("cloudwatch").shape_for("AlarmName").metadata
    assert api["maxLength"] == cloudwatch["max"]
    for name, refused in (("a" * api["maxLength"], False), ("a" * (api["maxLength"] + 1), True), (" \t", True), ("disk full", False)):
        assert (limits.violation(name, api) is not None) is refused, name


@pytest.mark.parametrize("path", sorted(limits.FIELDS))
def test_every_mapped_limit_is_broken_by_a_case_of_the_corpus_or_a_rule_before_it(path):
    # The pattern of the field, with an index where the path has [] and a key where it has {=}.
    pattern = re.escape(path).replace(r"\[\]", r"\[\d+\]").replace(r"\{=\}", r"\.[^.]+").replace(r"\{\}", "")
    assert any(re.fullmatch(pattern, case["field"]) for case in CORPUS), path


def test_tags_are_limited_by_the_strictest_tagged_type_counting_ours():
    limit = limits.tags_limit()
    strictest = min(limits.constraints(limits.Cfn(t, "Tags")).get("maxItems", 10**9) for t in limits.TAGGED_TYPES)
    assert limits.constraints(limit.source)["maxItems"] == strictest == 50
    # project, environment, dev's owner, and the SageMaker tag both references put on the cluster
    given = {**validation.load_settings(_ctx({}), "dev")[0].all_tags, **naming.HYPERPOD_CLUSTER_TAGS}
    ok = {f"t{i}": "x" for i in range(strictest - len(given))}
    validation.load_settings(_ctx({"tags": ok}), "dev")
    with pytest.raises(config.ConfigError, match=r"dev: tags: 51 entries; at most 50"):
        validation.load_settings(_ctx({"tags": {**ok, "one": "more"}}), "dev")


def test_the_log_retention_choices_are_exactly_the_schemas():
    choices = typing.get_args(ProtectionSettings.model_fields["log_retention_days"].annotation)
    assert list(choices) == limits.constraints(limits.FIELDS["protection.log_retention_days"].source)["enum"]


def test_every_catalogue_type_is_one_sagemaker_knows():
    # The SageMaker API's own list of cluster instance types (ClusterInstanceType): a type
    # the catalogue offers but HyperPod does not would fail CreateCluster.
    known = limits._service_model("sagemaker").shape_for("ClusterInstanceType").enum
    assert sorted(set(catalogue.CATALOGUE) - set(known)) == []


def test_a_rule_that_already_named_a_field_keeps_its_own_line():
    # The naming rule says why a 64-character HyperPod name breaks; the schema's line would repeat it.
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(_ctx({"hyperpod": {"cluster_name": "x" * 64}}), "dev")
    assert len([p for p in err.value.problems if p.startswith("dev: hyperpod.cluster_name:")]) == 1


def _ctx(patch):
    from tests.conftest import patched_context

    return patched_context("dev", patch)


def test_the_partition_of_every_region_is_botocores():
    # botocore's endpoint data (partitions.json) is AWS's own map of regions to partitions.
    import botocore.session

    from infra import cfn_schema

    session = botocore.session.get_session()
    regions = [p.stem for p in (cfn_schema._schemas() / "providers").glob("*.json")]
    checked = 0
    for region in regions:
        try:
            expected = session.get_partition_for_region(region)
        except Exception:  # noqa: BLE001 - a region botocore does not know yet
            continue
        assert naming.partition(region) == expected, region
        checked += 1
    assert checked > 25


def test_zone_ids_name_their_region_as_aws_writes_them():
    # AWS RAM, "Availability Zone IDs for your AWS resources": use1-az1, usw2-az1, euc1-az1,
    # apse2-az1, apne1-az1, usgw1-az1, cnn1-az1.
    from infra.config.network import zone_id_prefix

    documented = {"us-east-1": "use1", "us-west-2": "usw2", "eu-central-1": "euc1", "ap-southeast-2": "apse2",
                  "ap-northeast-1": "apne1", "us-gov-west-1": "usgw1", "cn-north-1": "cnn1"}
    assert {region: zone_id_prefix(region) for region in documented} == documented


@pytest.mark.parametrize("field, service, operation, member", [
    ("hyperpod.existing_execution_role_arn", "sagemaker", "CreateCluster", ("InstanceGroups", "ExecutionRole")),
    ("eks.existing_cluster.kubectl_role_arn", "lambda", "CreateFunction", ("Role",)),
    ("hyperpod.instance_groups[].training_plan_arn", "sagemaker", "CreateCluster", ("InstanceGroups", "TrainingPlanArn")),
])
def test_an_arn_field_is_held_to_the_pattern_of_the_api_that_receives_it(field, service, operation, member):
    # botocore's own model of the call that takes the value: the shape it names, and its pattern.
    import botocore.session

    shape = botocore.session.get_session().get_service_model(service).operation_model(operation).input_shape
    for name in member:
        shape = shape.members[name]
        shape = shape.member if shape.type_name == "list" else shape
    assert limits.FIELDS[field].source == limits.Api(service, shape.name)
    rules = limits.constraints(limits.FIELDS[field].source)
    assert rules["pattern"] == f"^(?:{shape.metadata['pattern']})$"
    if shape.name == "RoleArn":
        # IAM's path grammar takes any printable ASCII between slashes (botocore's IAM pathType);
        # the receiving API does not take ~ or !, nor a name IAM would refuse anyway.
        assert re.fullmatch(botocore.session.get_session().get_service_model("iam").shape_for("pathType").metadata["pattern"], "/~ml/")
        for arn, refused in (("arn:aws:iam::111111111111:role/~ml/exec", True), ("arn:aws:iam::111111111111:role/ops!/exec", True),
                             ("arn:aws:iam::111111111111:role/ml/exec", False), ("arn:aws-us-gov:iam::111111111111:role/exec", False)):
            assert (limits.violation(arn, rules) is not None) is refused, arn
