"""`hyperpod-cdk accept` where a team serves (cli/accept/serving.py): the endpoint `render-endpoint`
defines, its status as the operator writes it (held to the official sagemaker-hyperpod model,
InferenceEndpointConfigStatus), and one request through SageMaker Runtime's InvokeEndpoint, as the
SDK's HPEndpoint.invoke sends it (botocore's Stubber: the call held to the service's model)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from cli import accept
from cli.accept import serving
from infra import validation
from manifests import endpoint as endpoint_manifest
from tests.cli.test_accept import RECORDING
from tests.conftest import CAPABILITIES, patched_context
from tests.manifests.official import model_module

MODEL = "sagemaker/hyperpod/inference/config/hp_endpoint_config.py"
ANSWER = {"id": "cmpl-1", "object": "text_completion", "model": "llama3-1-8b-sample",
          "choices": [{"index": 0, "text": " Paris.", "finish_reason": "length"}],
          "usage": {"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9}}


@pytest.fixture(scope="module")
def settings():
    return validation.load_settings(patched_context("dev", CAPABILITIES["inference"]), "dev")[0]


def _applied(settings, state: str = "DeploymentComplete", ready: int = 1, sagemaker: str | None = "InService", **deployment) -> dict:
    """The endpoint as render-endpoint writes it, with a status as the operator reports it: only the
    official model's fields (the model forbids any other)."""
    (obj,) = endpoint_manifest.objects(settings, image="111111111111.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0")
    name = obj["spec"]["endpointName"]
    status = {"state": state, "deploymentStatus": {"name": name, "lastUpdated": "2026-12-07T15:04:05Z", **deployment,
                                                   "status": {"replicas": obj["spec"]["replicas"], "readyReplicas": ready}}}
    if sagemaker:
        status["endpoints"] = {"sagemaker": {"state": sagemaker, "endpointArn": f"arn:aws:sagemaker:us-east-1:111111111111:endpoint/{name}"}}
    model_module(MODEL).InferenceEndpointConfigStatus.model_validate(status)
    return {**obj, "status": status}


def _recording(tmp_path, settings, doc: dict | None, answer: str | None = None):
    folder = tmp_path / "run"
    shutil.copytree(RECORDING, folder)
    where = folder / "endpoints" / endpoint_manifest.namespace(settings)
    where.mkdir(parents=True)
    (where / f"{settings.inference.endpoint.name}.json").write_text(json.dumps(doc))
    if answer is not None:
        (folder / "invocations").mkdir()
        (folder / "invocations" / f"{settings.inference.endpoint.name}.json").write_text(answer)
    return accept.Recording(folder)


def _runtime(settings, answer: bytes | None = None, error: str | None = None):
    """A SageMaker Runtime client whose one InvokeEndpoint is stubbed, its parameters held to botocore's model."""
    client = boto3.client("sagemaker-runtime", region_name="us-east-1", aws_access_key_id="AKIAFAKE", aws_secret_access_key="s")
    stub = Stubber(client)
    expected = {"EndpointName": settings.inference.endpoint.name, "ContentType": "application/json", "Accept": "application/json",
                "Body": json.dumps(serving.request(settings)).encode()}
    if error:
        stub.add_client_error("invoke_endpoint", service_error_code=error, service_message="Received server error (500) from primary",
                              http_status_code=424, expected_params=expected)
    else:
        stub.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(answer), len(answer)), "ContentType": "application/json"},
                          expected)
    stub.activate()
    return client, stub


def _lines(checks) -> dict[str, tuple[str, str]]:
    return {c.subject: (c.status, c.detail) for c in checks if c.check == "endpoint"}


def test_a_serving_endpoint_passes_on_its_status_and_a_completion_through_sagemaker_runtime(tmp_path, settings):
    name, namespace = settings.inference.endpoint.name, endpoint_manifest.namespace(settings)
    client, stub = _runtime(settings, json.dumps(ANSWER).encode())
    # The whole accept run, on a recorded cluster, with the live request.
    report = accept.run(settings, _recording(tmp_path, settings, _applied(settings)), runtime=client)
    stub.assert_no_pending_responses()
    lines = _lines(report.checks)
    assert lines[f"{namespace}/{name}"] == ("pass", f"DeploymentComplete, 1 of 1 replica(s) ready, SageMaker endpoint {name} InService")
    assert lines[f"{namespace}/{name} request"] == ("pass", f"InvokeEndpoint {name} completed 'The capital of France is' with ' Paris.'")
    # The request is the server's route's shape: vLLM's completions (the default path) or its chat completions.
    assert serving.request(settings) == {"model": name, "prompt": serving.PROMPT, "max_tokens": serving.MAX_TOKENS}
    chat = validation.load_settings(patched_context("dev", {**CAPABILITIES["inference"], "inference": {
        **CAPABILITIES["inference"]["inference"], "endpoint": {**CAPABILITIES["inference"]["inference"]["endpoint"],
                                                               "invocation_path": "v1/chat/completions"}}}), "dev")[0]
    assert serving.request(chat)["messages"] == [{"role": "user", "content": serving.PROMPT}]


def test_an_endpoint_not_serving_yet_says_why_and_sends_nothing(tmp_path, settings):
    name, namespace = settings.inference.endpoint.name, endpoint_manifest.namespace(settings)
    doc = _applied(settings, state="DeploymentInProgress", ready=0, sagemaker=None, reason="ProgressDeadlineExceeded",
                   message="ReplicaSet has timed out progressing")
    checks = serving.endpoint_checks(settings, _recording(tmp_path, settings, doc), runtime=None)
    status, detail = _lines(checks)[f"{namespace}/{name}"]
    assert status == "fail"
    assert detail.startswith("state DeploymentInProgress, not DeploymentComplete (ProgressDeadlineExceeded; ReplicaSet has timed out")
    assert "0 of 1 replica(s) ready" in detail and f"SageMaker endpoint {name} not registered" in detail
    assert _lines(checks)[f"{namespace}/{name} request"] == ("skip", "the endpoint is not serving yet")


def test_a_model_error_and_an_answer_that_is_no_completion_fail_in_one_line(tmp_path, settings):
    name, namespace = settings.inference.endpoint.name, endpoint_manifest.namespace(settings)
    cluster = _recording(tmp_path, settings, _applied(settings))
    client, _ = _runtime(settings, error="ModelError")
    status, detail = _lines(serving.endpoint_checks(settings, cluster, client))[f"{namespace}/{name} request"]
    assert status == "fail" and detail.startswith(f"InvokeEndpoint {name}: ModelError: ")
    client, _ = _runtime(settings, b"<html>502 Bad Gateway</html>")
    assert _lines(serving.endpoint_checks(settings, cluster, client))[f"{namespace}/{name} request"] == (
        "fail", "the answer is no OpenAI-style completion: <html>502 Bad Gateway</html>")


def test_an_endpoint_not_applied_is_skipped_with_the_command_that_applies_it(tmp_path, settings):
    name, namespace = settings.inference.endpoint.name, endpoint_manifest.namespace(settings)
    calls = []

    def run(args, **kw):
        calls.append(args)
        return subprocess.CompletedProcess(args, 1, "", f'Error from server (NotFound): inferenceendpointconfigs.inference.sagemaker.aws.'
                                                        f'amazon.com "{name}" not found\n')

    checks = serving.endpoint_checks(settings, accept.Kubectl(run=run), runtime=None)
    assert calls == [["kubectl", "get", "inferenceendpointconfigs.inference.sagemaker.aws.amazon.com", name, "-n", namespace, "-o", "json"]]
    assert _lines(checks) == {f"{namespace}/{name}": ("skip", "not applied; apply it with `hyperpod-cdk render-endpoint -c env=dev | "
                                                              "kubectl apply -f -`, then run accept again")}
    # A recording without it skips; an environment that serves nothing has no endpoint lines.
    assert _lines(serving.endpoint_checks(settings, accept.Recording(RECORDING))) == {
        f"{namespace}/{name}": ("skip", "not in the recording")}
    assert serving.endpoint_checks(validation.load_settings(patched_context("dev", {}), "dev")[0], accept.Recording(RECORDING)) == []
