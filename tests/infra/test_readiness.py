"""The readiness gates' handlers, each held against what judges it outside this project:
aws-iam-authenticator's token verifier, a real TLS server speaking the Kubernetes node list,
the SageMaker API's shapes (botocore's Stubber), and aws-cdk-lib's provider framework."""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from infra import timing
from infra.handlers import accelerators, chain, hyperpod_nodes
from tests.conftest import cdk_lib_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NODES = json.loads((FIXTURES / "nodes" / "hyperpod_gpu_nodes.json").read_text())
GPU = {"Count": "4", "Resources": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}}


@pytest.fixture(autouse=True)
def handler_environment(monkeypatch):
    """What every gate function's environment holds (ChainedWait sets it from infra/timing.py)."""
    for name, value in timing.handler_environment().items():
        monkeypatch.setenv(name, value)


def _link(request="Create", link="1/1", deadline=10**10, **props):
    return {
        "RequestType": request,
        "PhysicalResourceId": "hyperpod-prod",
        "ResourceProperties": {"Link": link, "LinkSeconds": "3000", "TotalSeconds": str(3000 * int(link[-1])), **props},
        "Data": {"Deadline": str(deadline)},
    }


# ---------------------------------------------------------------- the chain


def test_a_wait_longer_than_a_link_is_split_into_links_that_each_fit_cloudformations_limit():
    for minutes in (1, 30, 50, 51, 115, 145, 600):
        links = timing.links(minutes)
        assert sum(l.seconds for l in links) >= minutes * 60
        assert all(l.seconds <= timing.LINK_WAIT_S for l in links)
        assert [l.final for l in links] == [False] * (len(links) - 1) + [True]
    # A link's own deadline, then the provider framework's, then CloudFormation's (1-3600 s).
    assert timing.LINK_WAIT_S < timing.LINK_PROVIDER_TIMEOUT_S < timing.LINK_SERVICE_TIMEOUT_S <= timing.SERVICE_TIMEOUT_MAX_S


def test_a_link_that_runs_out_of_time_hands_over_and_only_the_last_one_fails():
    def check():
        return ["gpu has 2 of 4 Running"]

    def timed_out(missing, error, minutes):
        return f"after {minutes} min: {missing[0]}"

    assert chain.poll(_link(link="1/3", deadline=100), check, timed_out, now=lambda: 50) == {"IsComplete": False}
    assert chain.poll(_link(link="1/3", deadline=100), check, timed_out, now=lambda: 101)["IsComplete"] is True
    with pytest.raises(TimeoutError, match="after 150 min: gpu has 2 of 4 Running"):
        chain.poll(_link(link="3/3", deadline=100), check, timed_out, now=lambda: 101)


def test_each_link_sets_its_own_deadline_and_delete_never_waits():
    started = chain.start(_link(), "hyperpod-prod", now=lambda: 1000)
    assert started == {"PhysicalResourceId": "hyperpod-prod", "Data": {"Deadline": "4000"}}
    assert chain.start(_link("Delete"), "x") == {"PhysicalResourceId": "hyperpod-prod"}
    assert chain.poll(_link("Delete"), lambda: ["never asked"], None) == {"IsComplete": True}


def test_the_provider_framework_fails_the_resource_on_any_error_so_transient_ones_must_be_caught():
    # aws-cdk-lib's provider framework (custom-resources/lib/provider-framework/runtime/cfn-response.js):
    # safeHandler re-throws only its own Retry and answers FAILED to CloudFormation for anything
    # else. A throttled ListClusterNodes would end the whole deploy; the handlers catch it instead.
    source = cdk_lib_source("provider-framework/runtime/cfn-response.js")
    assert "if(e instanceof Retry)throw" in source and 'submitResponse("FAILED",event' in source


# ---------------------------------------------------------------- calls inside the function's time


def test_a_killed_function_fails_the_resource_while_a_not_yet_polls_again():
    # aws-cdk-lib's provider framework (provider-framework/runtime/framework.js): a user function
    # that Lambda ends (its timeout) comes back with FunctionError, which invokeUserFunction throws,
    # and safeHandler answers FAILED; IsComplete false throws its Retry, and the waiter polls again.
    source = cdk_lib_source("provider-framework/runtime/framework.js")
    assert "if(resp.FunctionError){" in source and "e=new Error(message);throw" in source
    assert "!isCompleteResult.IsComplete)throw" in source and "new cfnResponse.Retry(" in source


def test_every_call_a_gate_makes_ends_inside_its_functions_timeout(synth):
    # botocore's defaults would not: 60 s to connect and 60 s to read (botocore.endpoint).
    from botocore.endpoint import DEFAULT_TIMEOUT
    from botocore.retries.standard import ExponentialBackoff

    assert DEFAULT_TIMEOUT > timing.IS_COMPLETE_TIMEOUT_S
    # The longest sleep before a retry, as botocore's standard mode computes it: a throttle's
    # rand(0, 1) x 1 s x 2**(attempt - 1), raised by a retry-after header by 5 s at most.
    for attempt in range(1, timing.SDK_MAX_ATTEMPTS):
        scale = ExponentialBackoff._DEFAULT_BACKOFF_CONFIG["throttling_base_scale"]
        assert scale * 2 ** (attempt - 1) + ExponentialBackoff._RETRY_AFTER_MAX_ADDITIONAL <= timing.SDK_BACKOFF_MAX_S
    worst_call = timing.SDK_MAX_ATTEMPTS * (timing.SDK_CONNECT_TIMEOUT_S + timing.SDK_READ_TIMEOUT_S) + (timing.SDK_MAX_ATTEMPTS - 1) * timing.SDK_BACKOFF_MAX_S
    assert timing.call_budget_s() >= worst_call + timing.HANDLER_REPLY_S
    assert timing.call_budget_s() >= timing.KUBERNETES_REQUEST_WORST_S + timing.HANDLER_REPLY_S
    # Work before the first call, the call, the reply: inside the check's Lambda timeout.
    assert timing.HANDLER_WORK_S + timing.call_budget_s() <= timing.IS_COMPLETE_TIMEOUT_S
    # The clients the handlers build carry them.
    client = chain.client("sagemaker", "us-east-1")
    assert (client.meta.config.connect_timeout, client.meta.config.read_timeout) == (timing.SDK_CONNECT_TIMEOUT_S, timing.SDK_READ_TIMEOUT_S)
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": timing.SDK_MAX_ATTEMPTS}
    # Every gate function deployed gets them, with the timeout they were sized for.
    functions = [r["Properties"] for suffix in ("network", "hyperpod") for r in synth("dev").resources(suffix, "AWS::Lambda::Function").values()
                 if r["Properties"].get("Description", "").startswith("Readiness gate")]
    assert len(functions) == 6  # start and check of the node, accelerator and teardown gates
    for function in functions:
        assert function["Environment"]["Variables"] == timing.handler_environment()
        assert function["Timeout"] in (timing.ON_EVENT_TIMEOUT_S, timing.IS_COMPLETE_TIMEOUT_S)


class _Invocation:
    """Lambda's context object, as far as the handlers use it."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.end - time.monotonic()) * 1000)


@pytest.fixture
def silent_server():
    """A server on 127.0.0.1 that accepts every connection and never answers: a stalled call."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.05)
    held, done = [], threading.Event()

    def accept():
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], held
    done.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


# The handlers' settings shrunk twentyfold, so that a hang's test takes a second: the same code
# reads them, and the same arithmetic holds them under the function's timeout (shrunk tenfold:
# loading botocore's models, the handler's own work, does not shrink).
SHRUNK = {"SDK_CONNECT_TIMEOUT_S": "0.1", "SDK_READ_TIMEOUT_S": "0.25", "SDK_MAX_ATTEMPTS": "2", "KUBERNETES_TIMEOUT_S": "0.2",
          "CALL_BUDGET_S": "0.85"}
SHRUNK_LAMBDA_S = timing.IS_COMPLETE_TIMEOUT_S / 10


def _gates(port: int, ca: str):
    from infra.handlers import fsx_backup, vpc_teardown

    return {
        "nodes": (hyperpod_nodes, "SAGEMAKER", _nodes_event()),
        "backup": (fsx_backup, "FSX", _backup_event()),
        "teardown": (vpc_teardown, "EC2", _teardown_event()),
        "accelerators": (accelerators, None, _link(ClusterName="hyperpod-prod", Region="us-east-1", Groups={"gpu": GPU},
                                                   Endpoint=f"https://127.0.0.1:{port}", CertificateAuthority=ca)),
    }


@pytest.mark.parametrize("gate", ["nodes", "backup", "teardown", "accelerators"])
def test_a_call_that_hangs_longer_than_the_function_may_run_is_a_not_yet_and_the_next_poll_goes_on(gate, silent_server, monkeypatch, tmp_path):
    port, held = silent_server
    for name, value in SHRUNK.items():
        monkeypatch.setenv(name, value)
    # timing's arithmetic, shrunk: two attempts, a non-throttling backoff (50 ms), the reply.
    assert 2 * (0.1 + 0.25) + 0.05 + 0.05 <= float(SHRUNK["CALL_BUDGET_S"]) < SHRUNK_LAMBDA_S
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    handler, service, event = _gates(port, _self_signed(tmp_path)[2])[gate]
    if service:  # botocore's service endpoint override: the handler's own client goes there
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    assert handler.is_complete(event, _Invocation(SHRUNK_LAMBDA_S)) == {"IsComplete": False}
    assert time.monotonic() - started < SHRUNK_LAMBDA_S and held  # it did call, and gave up in time
    # At the last deadline the failure names the stalled call.
    last = {**event, "Data": {"Deadline": "1"}}
    with pytest.raises(TimeoutError, match="last error: .*([Tt]imeout|timed out)"):
        handler.is_complete(last, _Invocation(SHRUNK_LAMBDA_S), now=lambda: 2)


def test_no_call_starts_that_the_invocation_has_no_time_left_to_finish(silent_server):
    port, held = silent_server
    left = timing.call_budget_s() - 1  # less than one call may take, with the real settings
    event = _nodes_event(deadline=1)
    with pytest.raises(TimeoutError, match=rf"last error: sagemaker ListClusterNodes: \d+s left of this invocation, a call may need {left + 1}s"):
        hyperpod_nodes.is_complete(event, _Invocation(left - 0.5), now=lambda: 2)
    assert hyperpod_nodes.is_complete(_nodes_event(), _Invocation(left)) == {"IsComplete": False}
    assert not held


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


def _nodes_event(**kw):
    return _link(ClusterName="hyperpod-prod", Region="us-east-1", InstanceGroups={"gpu": "4"}, **kw)


def test_throttling_or_a_cluster_not_visible_yet_keeps_the_node_gate_waiting():
    for code in ("ThrottlingException", "ResourceNotFound"):
        assert hyperpod_nodes.is_complete(_nodes_event(), None, client=_sagemaker(code)) == {"IsComplete": False}


def test_a_transient_error_at_the_end_is_named_in_the_failure():
    with pytest.raises(TimeoutError, match="last error: ListClusterNodes.*ThrottlingException"):
        hyperpod_nodes.is_complete(_nodes_event(deadline=1), None, client=_sagemaker("ThrottlingException"), now=lambda: 2)


def test_access_denied_fails_the_node_gate_at_once():
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="AccessDeniedException"):
        hyperpod_nodes.is_complete(_nodes_event(), None, client=_sagemaker("AccessDeniedException"))


def test_the_node_gate_completes_when_every_group_runs():
    running = [_node("gpu", "Running", i) for i in range(4)]
    assert hyperpod_nodes.is_complete(_nodes_event(), None, client=_sagemaker(running)) == {"IsComplete": True}


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


def _self_signed(tmp_path: Path) -> tuple[Path, Path, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    # What EKS's DescribeCluster (and CDK's clusterCertificateAuthorityData) gives: base64 of the PEM.
    return tmp_path / "cert.pem", tmp_path / "key.pem", base64.b64encode(pem).decode()


@pytest.fixture
def api_server(tmp_path):
    """An HTTPS server that answers GET /api/v1/nodes in two pages, as the API server
    paginates with limit/continue, and records what it was asked."""
    cert, key, ca = _self_signed(tmp_path)
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
    event = _link(ClusterName="hyperpod-prod", Groups={"gpu": {**GPU, "Count": "1"}})
    assert accelerators.is_complete(event, None, api=api) == {"IsComplete": True}
    assert [path for path, _, _ in seen] == ["/api/v1/nodes", "/api/v1/nodes"]
    assert seen[0][1]["labelSelector"] == ["sagemaker.amazonaws.com/instance-group-name in (gpu)"]
    assert seen[1][1]["continue"] == ["page2"]
    assert all(auth == "Bearer k8s-aws-v1.abc" for _, _, auth in seen)


def test_an_access_entry_not_propagated_yet_keeps_the_gate_waiting_and_a_missing_api_fails_it(api_server):
    endpoint, ca, _, status = api_server
    api = accelerators.KubernetesApi(endpoint, ca, token=lambda: "t")
    event = _link(ClusterName="hyperpod-prod", Groups={"gpu": GPU})
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
    _, _, other_ca = _self_signed(tmp_path / "other")
    api = accelerators.KubernetesApi(endpoint, other_ca, token=lambda: "t")
    with pytest.raises(chain.NotYet, match="CERTIFICATE_VERIFY_FAILED"):
        api.nodes("x")


def test_the_gate_fails_at_its_last_deadline_naming_the_nodes_and_where_to_look(api_server):
    endpoint, ca, _, _ = api_server
    api = accelerators.KubernetesApi(endpoint, ca, token=lambda: "t")
    event = _link(ClusterName="hyperpod-prod", Groups={"gpu": GPU}, deadline=1)
    with pytest.raises(TimeoutError) as err:
        accelerators.is_complete(event, None, api=api, now=lambda: 2)
    message = str(err.value)
    assert "accelerators not allocatable after 50 min: gpu has 1 of 4" in message
    assert "kubectl -n kube-system get daemonsets,pods" in message


# ---------------------------------------------------------------- FSx final backup


def _fsx(*responses):
    from infra.handlers import fsx_backup

    client = boto3.client("fsx", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for response in responses:
        expected = {"FileSystemId": "fs-0123456789abcdef0", "ClientRequestToken": fsx_backup.token("fs-0123456789abcdef0"),
                    "Tags": [{"Key": "Name", "Value": "final backup of fs-0123456789abcdef0"}]}
        if response not in ("AVAILABLE", "CREATING", "TRANSFERRING", "PENDING", "FAILED", "DELETED"):  # an error code
            stub.add_client_error("create_backup", service_error_code=response, http_status_code=400, expected_params=expected)
        else:
            stub.add_response("create_backup", {"Backup": {"BackupId": "backup-0a1b2c3d4e5f60718", "Lifecycle": response,
                                                            "Type": "USER_INITIATED", "CreationTime": "2026-12-03T10:00:00Z",
                                                            "FileSystem": {}}}, expected)
    stub.activate()
    return client


def _backup_event(request="Delete", deadline=10**10):
    return _link(request, deadline=deadline, FileSystemId="fs-0123456789abcdef0", Region="us-east-1")


def test_a_final_backup_is_taken_only_on_delete_and_waited_for_until_available():
    from infra.handlers import fsx_backup

    assert fsx_backup.is_complete(_backup_event("Create"), None, client=object()) == {"IsComplete": True}
    assert fsx_backup.on_event(_backup_event("Create"), None) == {"PhysicalResourceId": "final-backup-fs-0123456789abcdef0"}
    assert "Deadline" in fsx_backup.on_event(_backup_event("Delete"), None)["Data"]
    assert fsx_backup.is_complete(_backup_event(), None, client=_fsx("CREATING")) == {"IsComplete": False}
    # A daily automatic backup in progress only delays it.
    assert fsx_backup.is_complete(_backup_event(), None, client=_fsx("BackupInProgress")) == {"IsComplete": False}
    assert fsx_backup.is_complete(_backup_event(), None, client=_fsx("AVAILABLE")) == {"IsComplete": True}
    with pytest.raises(RuntimeError, match="is FAILED"):
        fsx_backup.is_complete(_backup_event(), None, client=_fsx("FAILED"))
    with pytest.raises(TimeoutError, match="The file system is kept: run cdk destroy again once `aws fsx describe-backups --backup-ids backup-0a1b2c3d4e5f60718`"):
        fsx_backup.is_complete(_backup_event(deadline=1), None, client=_fsx("CREATING"), now=lambda: 2)
    # FSx's ClientRequestToken: at most 63 of [A-Za-z0-9_.-] (its API reference).
    import re

    assert re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", fsx_backup.token("fs-" + "0" * 60))


# ---------------------------------------------------------------- VPC teardown


VPC, SUBNET, GROUP = "vpc-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60711", "sg-0a1b2c3d4e5f60718"


def _ec2(*pages, group: str | None = None):
    """An EC2 client answering DescribeNetworkInterfaces with `pages` (botocore validates each
    response against EC2's model) for the teardown's filters."""
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    filters = [{"Name": "vpc-id", "Values": [VPC]}] + ([{"Name": "group-id", "Values": [group]}] if group else [])
    for enis in pages:
        stub.add_response("describe_network_interfaces", {"NetworkInterfaces": enis}, {"Filters": filters})
    stub.activate()
    return client


def _teardown_event(request="Delete", deadline=10**10, **props):
    return _link(request, deadline=deadline, VpcId=VPC, Region="us-east-1", SubnetIds=[SUBNET], SecurityGroupId=GROUP, **props)


def _eni(id_: str, kind: str, status: str, description: str, requester: str | None = None, instance: str | None = None) -> dict:
    eni = {"NetworkInterfaceId": id_, "InterfaceType": kind, "Status": status, "Description": description, "VpcId": VPC,
           "SubnetId": SUBNET, "Groups": [{"GroupId": GROUP, "GroupName": "efa"}], "RequesterManaged": requester is not None}
    if requester:
        eni["RequesterId"] = requester
    if instance:
        eni["Attachment"] = {"InstanceId": instance, "Status": "attached", "DeviceIndex": 1}
    return eni


# What holds a HyperPod VPC at teardown, as EC2 describes each: Lambda's Hyperplane interface,
# the VPC CNI's on a node (made through the execution role: "aws-K8S-<instance>"), HyperPod's
# EFA interface on its instance, and one the CNI left behind when its node went (available).
LINGERING = [
    _eni("eni-0a1b2c3d4e5f60701", "lambda", "in-use", "AWS Lambda VPC ENI-hyperpod-dev-cluster-Handler", requester="AROAEXAMPLE:lambda"),
    _eni("eni-0a1b2c3d4e5f60702", "interface", "in-use", "aws-K8S-i-0a1b2c3d4e5f60701", instance="i-0a1b2c3d4e5f60701"),
    _eni("eni-0a1b2c3d4e5f60703", "efa", "in-use", "", requester="sagemaker.amazonaws.com", instance="i-0a1b2c3d4e5f60701"),
    _eni("eni-0a1b2c3d4e5f60704", "interface", "available", "aws-K8S-i-0a1b2c3d4e5f60702"),
]


def test_deleting_the_network_waits_for_every_interface_that_holds_it_whatever_made_it():
    from infra.handlers import vpc_teardown

    assert vpc_teardown.is_complete(_teardown_event("Create"), None, client=object()) == {"IsComplete": True}
    assert vpc_teardown.is_complete(_teardown_event(), None, client=_ec2(LINGERING)) == {"IsComplete": False}
    assert vpc_teardown.is_complete(_teardown_event(), None, client=_ec2([])) == {"IsComplete": True}
    with pytest.raises(TimeoutError) as err:
        vpc_teardown.is_complete(_teardown_event(deadline=1), None, client=_ec2(LINGERING), now=lambda: 2)
    message = str(err.value)
    assert "still in use after 50 min by 4: eni-0a1b2c3d4e5f60701 (lambda, in-use, requester AROAEXAMPLE:lambda" in message
    assert "eni-0a1b2c3d4e5f60702 (interface, in-use, made in this account, attached to i-0a1b2c3d4e5f60701, 'aws-K8S-i-0a1b2c3d4e5f60701')" in message
    assert "eni-0a1b2c3d4e5f60703 (efa, in-use, requester sagemaker.amazonaws.com" in message
    assert "eni-0a1b2c3d4e5f60704 (interface, available" in message and "aws ec2 delete-network-interface" in message
    command = message.split("Look: ")[1]
    assert command.startswith(f"aws ec2 describe-network-interfaces --region us-east-1 --filters Name=vpc-id,Values={VPC} --query")


def test_the_teardown_speaks_ec2s_api_as_botocore_models_it():
    # EC2's DescribeNetworkInterfaces as botocore's model documents it: the filter names the wait and
    # its command use, the fields it reads, and the interface types and statuses it is shown above.
    from infra.handlers import vpc_teardown

    model = botocore.session.get_session().get_service_model("ec2")
    filters_doc = model.operation_model("DescribeNetworkInterfaces").input_shape.members["Filters"].documentation
    for f in vpc_teardown.interface_filters(VPC, GROUP):
        assert f"<code>{f['Name']}</code>" in filters_doc
    shape = model.shape_for("NetworkInterface")
    for field in ("NetworkInterfaceId", "InterfaceType", "Status", "RequesterId", "RequesterManaged", "Description", "Attachment"):
        assert field in shape.members
    assert "InstanceId" in shape.members["Attachment"].members
    assert {e["InterfaceType"] for e in LINGERING} <= set(shape.members["InterfaceType"].enum)
    assert {e["Status"] for e in LINGERING} <= set(shape.members["Status"].enum)
    # The CLI command's --query names the same fields.
    command = vpc_teardown.describe_command("us-east-1", vpc_teardown.interface_filters(VPC))
    for field in ("NetworkInterfaceId", "InterfaceType", "Status", "RequesterId", "Attachment.InstanceId", "Description"):
        assert field in command


def test_the_nodes_interfaces_hold_the_teardown_until_they_are_gone():
    # moto's EC2: an interface in the HyperPod subnet with the EFA group, as the VPC CNI makes it
    # on a node, holds the teardown in the stack's own VPC and, by its group, in an existing one;
    # another owner's interface in an existing VPC does not.
    from moto import mock_aws

    from infra.handlers import vpc_teardown

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        efa = ec2.create_security_group(GroupName="efa", Description="efa", VpcId=vpc)["GroupId"]
        other = ec2.create_security_group(GroupName="theirs", Description="theirs", VpcId=vpc)["GroupId"]
        node = ec2.create_network_interface(SubnetId=subnet, Groups=[efa], Description="aws-K8S-i-0a1b2c3d4e5f60701")
        theirs = ec2.create_network_interface(SubnetId=subnet, Groups=[other], Description="another team's")
        own = _link("Delete", VpcId=vpc, Region="us-east-1", SubnetIds=[subnet], SecurityGroupId=efa)
        existing = _link("Delete", VpcId=vpc, Region="us-east-1", SubnetIds=[subnet], SecurityGroupId=efa,
                         OnlyInterfacesOfTheGroup="true")
        assert vpc_teardown.is_complete(own, None, client=ec2) == {"IsComplete": False}
        assert vpc_teardown.is_complete(existing, None, client=ec2) == {"IsComplete": False}
        ec2.delete_network_interface(NetworkInterfaceId=node["NetworkInterface"]["NetworkInterfaceId"])
        assert vpc_teardown.is_complete(existing, None, client=ec2) == {"IsComplete": True}
        assert vpc_teardown.is_complete(own, None, client=ec2) == {"IsComplete": False}  # the VPC goes: theirs holds it
        ec2.delete_network_interface(NetworkInterfaceId=theirs["NetworkInterface"]["NetworkInterfaceId"])
        assert vpc_teardown.is_complete(own, None, client=ec2) == {"IsComplete": True}


def test_nothing_that_owns_an_interface_is_deleted_after_the_wait_and_everything_it_guards_is(synth):
    # CloudFormation deletes a resource only after everything that refers to it. What the wait refers
    # to (its subnets, group, VPC) goes after it; what owns interfaces must not be among them, or the
    # wait would wait for its own successor.
    owners = {"AWS::EC2::VPCEndpoint", "AWS::EC2::NatGateway", "AWS::EC2::NetworkInterface", "AWS::EC2::Instance",
              "AWS::Lambda::Function"}
    for name in ("dev", "closed-network", "existing-vpc"):
        resources = synth(name).templates["network"]["Resources"]
        for lid, r in resources.items():
            if r["Type"] != "Custom::VpcTeardown":
                continue
            after = _ancestors(resources, lid)
            held = {resources[a]["Type"] for a in after} & owners
            assert not held - {"AWS::Lambda::Function"}, (name, held)
            assert not [a for a in after if resources[a]["Type"] == "AWS::Lambda::Function" and "VpcConfig" in resources[a]["Properties"]]
            subnets = {k for k, v in resources.items() if v["Type"] == "AWS::EC2::Subnet"}
            assert subnets <= after, (name, subnets - after)


def _ancestors(resources: dict, lid: str) -> set[str]:
    """Every resource `lid` refers to or depends on, transitively."""
    import re

    seen, todo = set(), [lid]
    while todo:
        r = resources[todo.pop()]
        text = json.dumps(r.get("Properties", {}))
        refs = set(re.findall(r'"Ref": "([A-Za-z0-9]+)"', text)) | set(re.findall(r'"Fn::GetAtt": \["([A-Za-z0-9]+)"', text))
        depends = r.get("DependsOn", [])
        refs |= set(depends if isinstance(depends, list) else [depends])
        for ref in refs & set(resources) - seen:
            seen.add(ref)
            todo.append(ref)
    return seen


def test_deleting_the_network_removes_what_guardduty_added_to_the_vpc_and_nothing_else():
    # GuardDuty's automated agent adds a guardduty-data endpoint and a security group, both
    # tagged GuardDutyManaged (AmazonGuardDutyServiceRolePolicy allows it to create no other);
    # they keep the subnets and the VPC in use (terraform-provider-aws issue 46747).
    from moto import mock_aws

    from infra.handlers import vpc_teardown

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        other_vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        other_subnet = ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.1.1.0/24")["Subnet"]["SubnetId"]
        tag = lambda kind: [{"ResourceType": kind, "Tags": [{"Key": "GuardDutyManaged", "Value": "true"}]}]  # noqa: E731

        def group(vpc_id, name, tagged):
            return ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc_id,
                                             **({"TagSpecifications": tag("security-group")} if tagged else {}))["GroupId"]

        def endpoint(vpc_id, subnet_id, service, groups, tagged):
            return ec2.create_vpc_endpoint(VpcId=vpc_id, ServiceName=f"com.amazonaws.us-east-1.{service}", VpcEndpointType="Interface",
                                           SubnetIds=[subnet_id], SecurityGroupIds=groups,
                                           **({"TagSpecifications": tag("vpc-endpoint")} if tagged else {}))["VpcEndpoint"]["VpcEndpointId"]

        gd_group = group(vpc, f"GuardDutyManagedSecurityGroup-{vpc}", True)
        gd_endpoint = endpoint(vpc, subnet, "guardduty-data", [gd_group], True)
        ours = group(vpc, "efa", False)
        our_endpoint = endpoint(vpc, subnet, "ecr.api", [ours], False)
        untagged_gd = endpoint(vpc, subnet, "guardduty-data", [ours], False)  # made by hand: not GuardDuty's
        elsewhere_group = group(other_vpc, f"GuardDutyManagedSecurityGroup-{other_vpc}", True)
        elsewhere = endpoint(other_vpc, other_subnet, "guardduty-data", [elsewhere_group], True)

        event = _link("Delete", deadline=10**10, VpcId=vpc, Region="us-east-1", SubnetIds=[subnet], SecurityGroupId=ours,
                      RemoveGuardDuty="true")
        # First poll: the endpoint is deleted, its group waits for it; then the group goes. The
        # other endpoints' interfaces still hold the VPC: CloudFormation deletes the stack's own
        # beside the wait, a person the one made by hand.
        assert vpc_teardown.is_complete(event, None, client=ec2) == {"IsComplete": False}
        assert vpc_teardown.is_complete(event, None, client=ec2) == {"IsComplete": False}
        state = {e["VpcEndpointId"]: e["State"] for e in ec2.describe_vpc_endpoints()["VpcEndpoints"]}
        assert state[gd_endpoint] == "deleted"
        assert {state[our_endpoint], state[untagged_gd], state[elsewhere]} == {"available"}
        groups = {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]}
        assert gd_group not in groups and {ours, elsewhere_group} <= groups
        ec2.delete_vpc_endpoints(VpcEndpointIds=[our_endpoint, untagged_gd])
        assert vpc_teardown.is_complete(event, None, client=ec2) == {"IsComplete": True}

        # An existing VPC (no RemoveGuardDuty): GuardDuty's endpoint there is left alone.
        event = _link("Delete", deadline=10**10, VpcId=other_vpc, Region="us-east-1", SubnetIds=[other_subnet], SecurityGroupId=ours,
                      OnlyInterfacesOfTheGroup="true")
        assert vpc_teardown.is_complete(event, None, client=ec2) == {"IsComplete": True}
        assert ec2.describe_vpc_endpoints(VpcEndpointIds=[elsewhere])["VpcEndpoints"][0]["State"] == "available"


def test_only_the_networks_own_vpc_is_cleaned_of_guardduty_and_only_tagged_resources_may_be_deleted(synth):
    for name, owned in (("dev", True), ("existing-vpc", False)):
        resources = synth(name).templates["network"]["Resources"]
        (teardown,) = [r for r in resources.values() if r["Type"] == "Custom::VpcTeardown" and r["Properties"].get("Link", "").startswith("1/")]
        assert (teardown["Properties"].get("RemoveGuardDuty") == "true") is owned
        statements = [s for r in resources.values() if r["Type"] == "AWS::IAM::Policy"
                      for s in r["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "GuardDutyLeftovers"]
        assert len(statements) == owned
        for statement in statements:
            assert statement["Condition"] == {"Null": {"aws:ResourceTag/GuardDutyManaged": "false"}}


def test_in_an_existing_vpc_the_teardown_waits_only_for_interfaces_holding_the_group_it_deletes(synth):
    # The subnets of an existing VPC stay, and its owner's own functions keep their interfaces there:
    # waiting on those would end every destroy in a timeout. Ours hold the security group deleted here.
    from infra.handlers import vpc_teardown
    from tests.stacks.test_existing_cluster import WITH_OWN_ROLE

    for name, only in (("dev", False), ("existing-vpc", True)):
        (teardown,) = [r for r in synth(name).templates["network"]["Resources"].values()
                       if r["Type"] == "Custom::VpcTeardown" and r["Properties"].get("Link", "").startswith("1/")]
        assert (teardown["Properties"].get("OnlyInterfacesOfTheGroup") == "true") is only
    # An existing VPC and an existing group: the stack deletes neither subnets nor a group, so it waits for nothing.
    assert not [r for r in synth("dev", WITH_OWN_ROLE).templates["network"]["Resources"].values() if r["Type"] == "Custom::VpcTeardown"]

    client = _ec2([], group=GROUP)
    assert vpc_teardown.is_complete(_teardown_event(OnlyInterfacesOfTheGroup="true"), None, client=client) == {"IsComplete": True}
