"""The endpoint serving the sample job's model against the operator's official model
(PyPI `sagemaker-hyperpod`, sagemaker/hyperpod/inference/config/hp_endpoint_config.py, loaded by
path as tests/manifests/test_job.py loads the job's), and `render-endpoint`."""

from __future__ import annotations

import argparse

import pytest
import yaml

from infra import admission, config, validation
from manifests import endpoint as endpoint_manifest
from tests.conftest import CAPABILITIES, patched_context
from tests.manifests.official import model_module

MODEL_FILE = "sagemaker/hyperpod/inference/config/hp_endpoint_config.py"
IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/vllm:1"


@pytest.fixture(scope="module")
def crd():
    return model_module(MODEL_FILE)


def _settings(patch: dict | None = None):
    return validation.load_settings(patched_context("dev", config.deep_merge(CAPABILITIES["inference"], patch or {})), "dev")[0]


def _spec_keys(model) -> set[str]:
    return set(model.model_fields)


def test_the_endpoint_is_valid_by_the_operators_official_model(crd):
    (obj,) = endpoint_manifest.objects(_settings(), image=IMAGE)
    assert (obj["apiVersion"], obj["kind"]) == ("inference.sagemaker.aws.amazon.com/v1", "InferenceEndpointConfig")
    # Field names are the manifest's camelCase keys; nested models forbid unknown keys. The top
    # level ignores them (extra="ignore"), so its keys are checked against the model's fields.
    crd._HPEndpoint.model_validate(obj["spec"], by_alias=False, by_name=True)
    assert set(obj["spec"]) <= _spec_keys(crd._HPEndpoint)


def test_it_serves_the_model_from_where_the_job_writes_it():
    s = _settings()
    (obj,) = endpoint_manifest.objects(s, image=IMAGE)
    source = obj["spec"]["modelSourceConfig"]
    assert source["s3Storage"] == {"bucketName": s.checkpoint_bucket_name, "region": s.region}
    assert source["modelLocation"] == f"{s.sample_job.name}/serving"
    assert endpoint_manifest.model_uri(s) == f"s3://{s.checkpoint_bucket_name}/{s.sample_job.name}/serving"


def test_it_asks_for_what_admission_judged_in_its_teams_queue_at_the_inference_priority():
    s = _settings({"inference": {"endpoint": {"replicas": 2}}})
    (obj,) = endpoint_manifest.objects(s, image=IMAGE)
    assert obj["metadata"]["namespace"] == "hyperpod-ns-serving"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-serving-localqueue"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "inference-priority"
    requests = obj["spec"]["worker"]["resources"]["requests"]
    group = s.instance_group("gpu")
    judged = admission.replica_requests(group, 1)
    assert requests["nvidia.com/gpu"] == judged["nvidia.com/gpu"] and requests["memory"] == f"{judged['memory']}Gi"
    assert obj["spec"]["replicas"] == 2 and admission.endpoint(s).nodes == 2


def _args(**kw):
    return argparse.Namespace(**{"replicas": None, "team": None, "image": IMAGE, **kw})


def test_render_endpoint_prints_yaml_and_names_the_flag_that_breaks_the_quota(capsys):
    from cli import render_endpoint

    deployed = _settings()
    (obj,) = yaml.safe_load_all(render_endpoint.render(deployed, _args()))
    assert obj["spec"]["worker"]["image"] == IMAGE
    assert "training.export_hf" in capsys.readouterr().err
    with pytest.raises(config.ConfigError) as err:
        render_endpoint.render(deployed, _args(replicas=3))
    assert any(line.startswith("dev: --replicas: 3 replicas of 1 GPU") for line in err.value.problems), err.value.problems


def test_render_endpoint_refuses_where_serving_is_off():
    from cli import render_endpoint

    deployed = validation.load_settings(patched_context("dev", {}), "dev")[0]
    with pytest.raises(config.ConfigError, match="inference.enabled: false"):
        render_endpoint.render(deployed, _args())
