"""Tripwires: what SageMaker's API has and CloudFormation's schema (cfn-lint's, installed) does not yet.
Each test fails the day the installed schema gains the field, so it is exposed in config on purpose
(with its rule, its docs and its review callout) rather than left to HyperPod's default or passed
through unchecked. Sources: botocore's sagemaker model (ClusterAutoPatchConfig, DeepHealthCheckType) and
cfn-lint's AWS::SageMaker::Cluster schema, both read from the installed packages."""

from __future__ import annotations

import botocore.session
import pytest

from infra import cfn_schema
from infra.config.hyperpod import AUTO_PATCH_IDLE_WAIT_DEFAULT_SECONDS

CLUSTER = "AWS::SageMaker::Cluster"


def _api(shape: str):
    return botocore.session.get_session().get_service_model("sagemaker").shape_for(shape)


def _schema(definition: str) -> dict:
    return cfn_schema.definition(CLUSTER, definition)


@pytest.mark.parametrize("field, then", [
    ("IdleWaitWindowInSeconds", "offer auto_patch.idle_wait_seconds (3600-2160000) and say the chosen window, not the default, "
                                "in infra/config/hyperpod.py auto_patch_effect"),
    ("DrainPolicy", "offer the drain policy with strategy DrainFirst, together"),
])
def test_the_auto_patch_fields_the_api_has_are_not_in_cloudformation_yet(field, then):
    assert field in _api("ClusterAutoPatchConfig").members, f"the SageMaker API no longer has {field}: revisit auto_patch"
    assert field not in _schema("AutoPatchConfig")["properties"], (
        f"{cfn_schema.source(CLUSTER)} now has AutoPatchConfig.{field}: {then}")


def test_drain_first_is_an_api_strategy_not_yet_a_cloudformation_one():
    api = _api("ClusterAutoPatchConfig").members["PatchingStrategy"].enum
    schema = _schema("AutoPatchConfig")["properties"]["PatchingStrategy"]["enum"]
    assert "DrainFirst" in api
    assert "DrainFirst" not in schema, (
        f"{cfn_schema.source(CLUSTER)} now takes PatchingStrategy DrainFirst: validate takes the schema's enum, so it would "
        "pass with no drain policy to set; expose DrainPolicy with it (test above) and say what it does in auto_patch_effect")
    assert set(schema) == {"WhenIdle", "WhenAllIdle"}  # the two auto_patch_effect words, both "cordon all instances"


def test_the_multi_node_deep_health_check_is_an_api_value_not_yet_a_cloudformation_one():
    assert "MultiNodeTrainingValidation" in _api("DeepHealthCheckType").enum
    assert "MultiNodeTrainingValidation" not in _schema("DeepHealthCheckType")["enum"], (
        f"{cfn_schema.source(CLUSTER)} now takes MultiNodeTrainingValidation: decide what deep_health_checks offers "
        "(its duration in the deploy estimate, the instance types it runs on) before validate lets it through")


def test_the_idle_window_said_in_validate_and_review_is_the_apis_default():
    import re

    doc = _api("ClusterAutoPatchConfig").members["IdleWaitWindowInSeconds"].documentation
    assert re.search(r"The default is (\d+)", doc).group(1) == str(AUTO_PATCH_IDLE_WAIT_DEFAULT_SECONDS)
    strategies = re.sub("<[^>]+>", "", _api("ClusterAutoPatchConfig").members["PatchingStrategy"].documentation)
    assert strategies.count("Cordons all instances") >= 2  # WhenIdle and WhenAllIdle alike
