"""What `hyperpod-cdk accept` reads of the endpoint `render-endpoint` defines, where a team applied it:
the operator's status of it, then one request through it.

- The status, by the fields of the official model (sagemaker-hyperpod's
  `InferenceEndpointConfigStatus`): `state` DeploymentComplete, its Deployment's `readyReplicas`
  against the spec's `replicas`, and its SageMaker endpoint's `state` InService (the operator
  registers one by `spec.endpointName`).
- The request, as the SDK's own `HPEndpoint.invoke` sends it: SageMaker Runtime's InvokeEndpoint
  on that endpoint, JSON, which the endpoint passes to the model server's `invocationEndpoint`
  (`inference.endpoint.invocation_path`): an OpenAI-style completion of a few tokens.
"""

from __future__ import annotations

import json

from cli.accept.cluster import RECORDED_NOTHING, Check
from cli.diagnostics import clip
from infra.config import Settings

COMPLETE = "DeploymentComplete"  # InferenceEndpointConfigStatus.state
IN_SERVICE = "InService"  # botocore's sagemaker EndpointStatus
PROMPT = "The capital of France is"
MAX_TOKENS = 8


def request(settings: Settings) -> dict:
    """The body for the server's invocation path: a chat completion where the path is vLLM's chat
    route, else a plain completion (the OpenAI API's two request shapes)."""
    ep = settings.inference.endpoint
    if ep.invocation_path.rstrip("/").endswith("chat/completions"):
        return {"model": ep.name, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS}
    return {"model": ep.name, "prompt": PROMPT, "max_tokens": MAX_TOKENS}


def endpoint_checks(settings: Settings, cluster, runtime=None) -> list[Check]:
    """The endpoint's status, then a request through it (`runtime`: a SageMaker Runtime client; none
    for a recorded run, which reads the recorded answer)."""
    if not settings.inference.enabled:
        return []
    from manifests import endpoint as endpoint_manifest

    name, namespace = settings.inference.endpoint.name, endpoint_manifest.namespace(settings)
    subject = f"{namespace}/{name}"
    doc = cluster.endpoint(namespace, name)
    if doc is RECORDED_NOTHING:
        return [Check(namespace, "endpoint", subject, "skip", "not in the recording")]
    if doc is None:
        return [Check(namespace, "endpoint", subject, "skip", f"not applied; apply it with `hyperpod-cdk render-endpoint -c "
                      f"env={settings.env_name} | kubectl apply -f -`, then run accept again")]
    status = doc.get("status") or {}
    deployment = status.get("deploymentStatus") or {}
    want = (doc.get("spec") or {}).get("replicas", 1)
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    sagemaker = ((status.get("endpoints") or {}).get("sagemaker") or {})
    endpoint_name = (doc.get("spec") or {}).get("endpointName") or name
    problems = []
    if status.get("state") != COMPLETE:
        why = clip("; ".join(str(deployment[k]) for k in ("reason", "message") if deployment.get(k)), 80)
        problems.append(f"state {status.get('state') or '(none yet)'}, not {COMPLETE}" + (f" ({why})" if why else ""))
    if ready < want:
        problems.append(f"{ready} of {want} replica(s) ready")
    if sagemaker.get("state") != IN_SERVICE:
        problems.append(f"SageMaker endpoint {endpoint_name} {sagemaker.get('state') or 'not registered'}, not {IN_SERVICE}")
    detail = "; ".join(problems) or f"{COMPLETE}, {ready} of {want} replica(s) ready, SageMaker endpoint {endpoint_name} {IN_SERVICE}"
    checks = [Check(namespace, "endpoint", subject, "fail" if problems else "pass", detail)]
    if problems:
        return checks + [Check(namespace, "endpoint", f"{subject} request", "skip", "the endpoint is not serving yet")]
    return checks + [_request(settings, namespace, subject, endpoint_name, cluster, runtime)]


def _request(settings: Settings, namespace: str, subject: str, endpoint_name: str, cluster, runtime) -> Check:
    what = f"{subject} request"
    if runtime is None:
        answer = cluster.invocation(endpoint_name)
        if answer is None:
            return Check(namespace, "endpoint", what, "skip", "no answer in the recording")
    else:
        from botocore.exceptions import BotoCoreError, ClientError

        from cli.preflight import failure_line

        try:
            response = runtime.invoke_endpoint(EndpointName=endpoint_name, ContentType="application/json", Accept="application/json",
                                               Body=json.dumps(request(settings)).encode())
            answer = response["Body"].read().decode(errors="replace")
        except (BotoCoreError, ClientError) as err:
            return Check(namespace, "endpoint", what, "fail", clip(f"InvokeEndpoint {endpoint_name}: {failure_line(err, None)}"))
    try:
        choice = json.loads(answer)["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return Check(namespace, "endpoint", what, "fail", clip(f"the answer is no OpenAI-style completion: {answer.strip()}"))
    return Check(namespace, "endpoint", what, "pass", clip(f"InvokeEndpoint {endpoint_name} completed {PROMPT!r} with {text!r}"))
