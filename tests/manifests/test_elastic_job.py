"""The sample job rendered elastic (sample_job.max_nodes): the official CRD models accept
it, with the fields the hyp CLI writes for elastic training (replicaSpecs[].maxReplicas,
elasticPolicy min/max replicas), and the stop it asks for keeps the job's save budget."""

from __future__ import annotations

from infra import validation
from manifests import job as job_manifest
from tests.conftest import CONTEXT, patched_context
from tests.manifests.test_job import _validate, crd_model  # noqa: F401  (a fixture)

ELASTIC = {"sample_job": {"nodes": 2, "max_nodes": 4}}


def test_an_elastic_job_validates_against_the_official_models_with_min_and_max_replicas(crd_model):  # noqa: F811
    settings, _ = validation.load_settings(patched_context("prod", ELASTIC), "prod")
    parsed = _validate(crd_model, job_manifest.build(settings, image="x"))
    assert parsed.elasticPolicy.minReplicas == 2 and parsed.elasticPolicy.maxReplicas == 4
    assert parsed.replicaSpecs[0].replicas == 2 and parsed.replicaSpecs[0].maxReplicas == 4
    # A scale-down stops the job like any stop: the same save budget as the agent's SIGKILL.
    assert parsed.elasticPolicy.gracefulShutdownTimeoutInSeconds == job_manifest.SHUTDOWN_S


def test_a_job_without_max_nodes_is_not_elastic(crd_model):  # noqa: F811
    settings, _ = validation.load_settings(CONTEXT, "prod")
    manifest = job_manifest.build(settings, image="x")
    assert "elasticPolicy" not in manifest["spec"] and "maxReplicas" not in manifest["spec"]["replicaSpecs"][0]
    assert _validate(crd_model, manifest).elasticPolicy is None
