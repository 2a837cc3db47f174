"""The readiness gates' chain and their time, each held against what judges it outside this
project: a wait longer than CloudFormation lets one custom resource wait is split into links
that each fit (aws-cdk-lib's provider framework's own source), and every call a gate makes
ends inside its function's timeout (a server that never answers). The gates themselves:
test_node_gates.py and test_teardown.py."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from infra import timing
from infra.handlers import accelerators, chain, hyperpod_nodes
from tests.conftest import cdk_lib_source
from tests.infra.gate_events import GPU, backup_event, link_event, nodes_event, self_signed, set_handler_environment, teardown_event


@pytest.fixture(autouse=True)
def handler_environment(monkeypatch):
    set_handler_environment(monkeypatch)


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

    assert chain.poll(link_event(link="1/3", deadline=100), check, timed_out, now=lambda: 50) == {"IsComplete": False}
    assert chain.poll(link_event(link="1/3", deadline=100), check, timed_out, now=lambda: 101)["IsComplete"] is True
    with pytest.raises(TimeoutError, match="after 150 min: gpu has 2 of 4 Running"):
        chain.poll(link_event(link="3/3", deadline=100), check, timed_out, now=lambda: 101)


def test_each_link_sets_its_own_deadline_and_delete_never_waits():
    started = chain.start(link_event(), "hyperpod-prod", now=lambda: 1000)
    assert started == {"PhysicalResourceId": "hyperpod-prod", "Data": {"Deadline": "4000"}}
    assert chain.start(link_event("Delete"), "x") == {"PhysicalResourceId": "hyperpod-prod"}
    assert chain.poll(link_event("Delete"), lambda: ["never asked"], None) == {"IsComplete": True}


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
# reads them, and the same arithmetic holds them under the function's timeout (shrunk only
# fivefold: loading botocore's models, the handler's own work, does not shrink, and takes seconds
# on a loaded two-core machine).
SHRUNK = {"SDK_CONNECT_TIMEOUT_S": "0.1", "SDK_READ_TIMEOUT_S": "0.25", "SDK_MAX_ATTEMPTS": "2", "KUBERNETES_TIMEOUT_S": "0.2",
          "CALL_BUDGET_S": "0.85"}
SHRUNK_LAMBDA_S = timing.IS_COMPLETE_TIMEOUT_S / 5


def _gates(port: int, ca: str):
    from infra.handlers import fsx_backup, vpc_teardown

    return {
        "nodes": (hyperpod_nodes, "SAGEMAKER", nodes_event()),
        "backup": (fsx_backup, "FSX", backup_event()),
        "teardown": (vpc_teardown, "EC2", teardown_event()),
        "accelerators": (accelerators, None, link_event(ClusterName="hyperpod-prod", Region="us-east-1", Groups={"gpu": GPU},
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
    handler, service, event = _gates(port, self_signed(tmp_path)[2])[gate]
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
    event = nodes_event(deadline=1)
    with pytest.raises(TimeoutError, match=rf"last error: sagemaker ListClusterNodes: \d+s left of this invocation, a call may need {left + 1}s"):
        hyperpod_nodes.is_complete(event, _Invocation(left - 0.5), now=lambda: 2)
    assert hyperpod_nodes.is_complete(nodes_event(), _Invocation(left)) == {"IsComplete": False}
    assert not held
