"""The node gate and the accelerator gate, held against what judges them outside this project:
the SageMaker API's shapes (botocore's Stubber), aws-iam-authenticator's token verifier, and a
real TLS server speaking the Kubernetes node list."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from infra.handlers import accelerators, chain, hyperpod_nodes
from tests.infra.gate_events import GPU, NODES, link_event, nodes_event, self_signed, set_handler_environment


@pytest.fixture(autouse=True)
def handler_environment(monkeypatch):
    set_handler_environment(monkeypatch)


# ---------------------------------------------------------------- HyperPod nodes


def _node(group: str, status: str, i: int) -> dict:
    """One ClusterNodeSummaries entry in the shape botocore validates."""
    return {
        "InstanceGroupName": group,
        "InstanceId": f"i-0{i:016x}",
        "InstanceType": "ml.p5.48xlarge",
        "LaunchTime": "2026-12-02T10:00:00Z",
        "InstanceStatus": {"Status": status},
    }


def _sagemaker(*responses):
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for response in responses:
        if isinstance(response, str):
            stub.add_client_error("list_cluster_nodes", service_error_code=response, http_status_code=400)
        else:
            stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": response}, {"ClusterName": "hyperpod-prod"})
    stub.activate()
    return client


def test_throttling_or_a_cluster_not_visible_yet_keeps_the_node_gate_waiting():
    for code in ("ThrottlingException", "ResourceNotFound"):
        assert hyperpod_nodes.is_complete(nodes_event(), None, client=_sagemaker(code)) == {"IsComplete": False}


def test_a_transient_error_at_the_end_is_named_in_the_failure():
    with pytest.raises(TimeoutError, match="last error: ListClusterNodes.*ThrottlingException"):
        hyperpod_nodes.is_complete(nodes_event(deadline=1), None, client=_sagemaker("ThrottlingException"), now=lambda: 2)


def test_access_denied_fails_the_node_gate_at_once():
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="AccessDeniedException"):
        hyperpod_nodes.is_complete(nodes_event(), None, client=_sagemaker("AccessDeniedException"))


def test_the_node_gate_completes_when_every_group_runs():
    running = [_node("gpu", "Running", i) for i in range(4)]
    assert hyperpod_nodes.is_complete(nodes_event(), None, client=_sagemaker(running)) == {"IsComplete": True}


# ---------------------------------------------------------------- accelerators


def test_only_nodes_that_are_ready_schedulable_uncordoned_and_advertise_their_devices_count():
    lines = accelerators.shortfall({"gpu": GPU}, NODES["items"])
    (line,) = lines
    assert line.startswith("gpu has 1 of 4 nodes that can train (8 nvidia.com/gpu, 32 vpc.amazonaws.com/efa allocatable")
    assert "5 registered" in line
    assert "hyperpod-i-0a1b2c3d4e5f60702: allocatable nvidia.com/gpu 0 of 8, vpc.amazonaws.com/efa 0 of 32" in line
    assert "hyperpod-i-0a1b2c3d4e5f60703: cordoned" in line
    assert "hyperpod-i-0a1b2c3d4e5f60704: health UnschedulablePendingReplacement" in line
    assert accelerators.shortfall({"gpu": {**GPU, "Count": "1"}}, NODES["items"]) == []


def test_a_group_with_no_registered_nodes_says_so():
    (line,) = accelerators.shortfall({"gpu2": GPU}, NODES["items"])
    assert "gpu2 has 0 of 4" in line and "0 registered" in line


def test_the_eks_token_passes_aws_iam_authenticators_checks():
    # kubernetes-sigs/aws-iam-authenticator pkg/token/token.go, tokenVerifier.Verify: prefix
    # k8s-aws-v1., unpadded base64url, at most 4096 bytes, https to a regional STS host, path /,
    # only whitelisted query parameters, Action GetCallerIdentity, x-k8s-aws-id among the
    # signed headers, X-Amz-Expires 0-900, X-Amz-Date present.
    session = botocore.session.Session()
    session.set_credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "session-token")
    token = accelerators.eks_token("hyperpod-prod", "us-east-1", session=session)
    assert token.startswith("k8s-aws-v1.") and len(token) <= 4096 and "=" not in token
    body = token[len("k8s-aws-v1."):]
    url = urlparse(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode())
    assert (url.scheme, url.hostname, url.path) == ("https", "sts.us-east-1.amazonaws.com", "/")
    params = {k.lower(): v for k, v in parse_qs(url.query).items()}
    whitelist = {"action", "version", "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires",
                 "x-amz-security-token", "x-amz-signature", "x-amz-signedheaders"}
    assert set(params) <= whitelist and all(len(v) == 1 for v in params.values())
    assert params["action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in params["x-amz-signedheaders"][0].lower().split(";")
    assert 0 <= int(params["x-amz-expires"][0]) <= 900 and params["x-amz-date"][0]


@pytest.fixture
def api_server(tmp_path):
    """An HTTPS server that answers GET /api/v1/nodes in two pages, as the API server
    paginates with limit/continue, and records what it was asked."""
    cert, key, ca = self_signed(tmp_path)
    seen: list[tuple[str, dict, str]] = []
    status = {"code": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            query = parse_qs(url.query)
            seen.append((url.path, query, self.headers.get("Authorization", "")))
            if status["code"] != 200:
                self.send_response(status["code"])
                self.end_headers()
                return
            items = NODES["items"]
            first = "continue" not in query
            page = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": "page2"} if first else {},
                    "items": items[:3] if first else items[3:]}
            body = json.dumps(page).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}", ca, seen, status
    server.shutdown()


def test_the_gate_reads_every_page_of_nodes_over_tls_trusting_the_clusters_own_ca(api_server):
    endpoint, ca, seen, _ = api_server
    api = accelerators.KubernetesApi(endpoint, ca, token=lambda: "k8s-aws-v1.abc")
    event = link_event(ClusterName="hyperpod-prod", Groups={"gpu": {**GPU, "Count": "1"}})
    assert accelerators.is_complete(event, None, api=api) == {"IsComplete": True}
    assert [path for path, _, _ in seen] == ["/api/v1/nodes", "/api/v1/nodes"]
    assert seen[0][1]["labelSelector"] == ["sagemaker.amazonaws.com/instance-group-name in (gpu)"]
    assert seen[1][1]["continue"] == ["page2"]
    assert all(auth == "Bearer k8s-aws-v1.abc" for _, _, auth in seen)


def test_an_access_entry_not_propagated_yet_keeps_the_gate_waiting_and_a_missing_api_fails_it(api_server):
    endpoint, ca, _, status = api_server
    api = accelerators.KubernetesApi(endpoint, ca, token=lambda: "t")
    event = link_event(ClusterName="hyperpod-prod", Groups={"gpu": GPU})
    status["code"] = 401
    assert accelerators.is_complete(event, None, api=api) == {"IsComplete": False}
    with pytest.raises(TimeoutError, match="last error: GET /api/v1/nodes: HTTP 401"):
        accelerators.is_complete({**event, "Data": {"Deadline": "1"}}, None, api=api, now=lambda: 2)
    status["code"] = 404
    with pytest.raises(RuntimeError, match="HTTP 404"):
        accelerators.is_complete(event, None, api=api)


def test_a_server_whose_certificate_is_not_the_clusters_is_never_trusted(api_server, tmp_path):
    endpoint, _, _, _ = api_server
    (tmp_path / "other").mkdir()
    _, _, other_ca = self_signed(tmp_path / "other")
    api = accelerators.KubernetesApi(endpoint, other_ca, token=lambda: "t")
    with pytest.raises(chain.NotYet, match="CERTIFICATE_VERIFY_FAILED"):
        api.nodes("x")


def test_the_gate_fails_at_its_last_deadline_naming_the_nodes_and_where_to_look(api_server):
    endpoint, ca, _, _ = api_server
    api = accelerators.KubernetesApi(endpoint, ca, token=lambda: "t")
    event = link_event(ClusterName="hyperpod-prod", Groups={"gpu": GPU}, deadline=1)
    with pytest.raises(TimeoutError) as err:
        accelerators.is_complete(event, None, api=api, now=lambda: 2)
    message = str(err.value)
    assert "accelerators not allocatable after 50 min: gpu has 1 of 4" in message
    assert "kubectl -n kube-system get daemonsets,pods" in message
