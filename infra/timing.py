"""How long deploy steps take, and the limits every wait lives under.

Pure data and arithmetic (no CDK import), so the stacks size their waits and the review's
deploy plan estimates the same steps from one table.

The limits, each with the service that enforces it:
- CloudFormation fails a custom resource that has not answered within its `ServiceTimeout`:
  1 to 3600 seconds, default 3600 (CloudFormation User Guide, AWS::CloudFormation::CustomResource;
  aws-cdk-lib's `CustomResource` refuses anything else at synth). cfn-lint's bundled schema
  types the property as a bare integer, so no linter catches an overlong wait.
- Lambda runs a function for at most 900 seconds (Lambda quotas), which caps a wait that lives
  inside one invocation (the kubectl provider's `KubernetesObjectValue`).
- A longer wait is a chain of custom resources, each created after the one before it and each
  answering inside its own service timeout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ---------------------------------------------------------------------- service limits

SERVICE_TIMEOUT_MAX_S = 3600
LAMBDA_TIMEOUT_MAX_S = 900

# One link of a chained wait runs on aws-cdk-lib's provider framework: a start handler, then
# a waiter state machine that calls the check every POLL_INTERVAL_S, PROVIDER_ATTEMPTS times
# at most. Even if every call ran to its Lambda timeout, the link answers CloudFormation
# within the service timeout; our own deadline (LINK_WAIT_S) ends it sooner, with a failure
# that names what is missing rather than the framework's "Operation timed out".
ON_EVENT_TIMEOUT_S = 30
IS_COMPLETE_TIMEOUT_S = 30
POLL_INTERVAL_S = 60
LINK_SERVICE_TIMEOUT_S = SERVICE_TIMEOUT_MAX_S
PROVIDER_ATTEMPTS = (LINK_SERVICE_TIMEOUT_S - ON_EVENT_TIMEOUT_S) // (POLL_INTERVAL_S + IS_COMPLETE_TIMEOUT_S)
LINK_PROVIDER_TIMEOUT_S = PROVIDER_ATTEMPTS * POLL_INTERVAL_S
# By this wall-clock time at most LINK_WAIT_S / POLL_INTERVAL_S checks have run: a few
# attempts stay in hand when the deadline fires.
LINK_WAIT_S = (PROVIDER_ATTEMPTS - 4) * POLL_INTERVAL_S

# A wait inside one kubectl-provider invocation (its Lambda runs 15 minutes at most).
KUBECTL_WAIT_MAX_MINUTES = 14

# ---------------------------------------------------------------------- calls inside a handler

# Every call a gate's handler makes ends inside the handler's Lambda timeout. botocore's
# defaults (60 s connect, 60 s read, retries) outlast it: a stalled call gets the function
# killed, Lambda answers the invoke with FunctionError, and the provider framework then
# answers CloudFormation FAILED, without retry (aws-cdk-lib custom-resources framework.js
# invokeUserFunction throws on FunctionError; cfn-response.js safeHandler re-throws only its
# own Retry). A call that fails in time is a "not yet" instead: the next poll asks again.
SDK_CONNECT_TIMEOUT_S = 2
SDK_READ_TIMEOUT_S = 5
SDK_MAX_ATTEMPTS = 2  # botocore's total_max_attempts: the call and one retry
# The longest sleep before the retry: botocore's standard mode waits rand(0, 1) x 1 s after a
# throttle, raised to a service's x-amz-retry-after but by 5 s at most (ExponentialBackoff).
SDK_BACKOFF_MAX_S = 6
# The accelerator gate's GETs to the Kubernetes API (urllib: the timeout bounds the connect,
# the TLS handshake and each read, one after the other).
KUBERNETES_TIMEOUT_S = 4
KUBERNETES_REQUEST_WORST_S = 3 * KUBERNETES_TIMEOUT_S
# A handler's own work around its calls: before the first (the runtime's imports, the
# client, a token signed) and after the last (the reply).
HANDLER_WORK_S = 4
HANDLER_REPLY_S = 1


def sdk_call_worst_s() -> int:
    """The longest one AWS API call may take with these settings: every attempt its connect
    and read timeouts, and the sleeps between attempts."""
    return SDK_MAX_ATTEMPTS * (SDK_CONNECT_TIMEOUT_S + SDK_READ_TIMEOUT_S) + (SDK_MAX_ATTEMPTS - 1) * SDK_BACKOFF_MAX_S


def call_budget_s() -> int:
    """What a handler must still have left to start a call (an AWS or a Kubernetes one) and
    reply after it; with less, the check stops there and the next poll goes on."""
    return max(sdk_call_worst_s(), KUBERNETES_REQUEST_WORST_S) + HANDLER_REPLY_S


def handler_environment() -> dict[str, str]:
    """The settings every gate handler reads (infra/handlers/chain.py: client, within_time),
    handed to each function as its environment: the handlers run without this module."""
    return {
        "SDK_CONNECT_TIMEOUT_S": str(SDK_CONNECT_TIMEOUT_S),
        "SDK_READ_TIMEOUT_S": str(SDK_READ_TIMEOUT_S),
        "SDK_MAX_ATTEMPTS": str(SDK_MAX_ATTEMPTS),
        "KUBERNETES_TIMEOUT_S": str(KUBERNETES_TIMEOUT_S),
        "CALL_BUDGET_S": str(call_budget_s()),
    }

# ---------------------------------------------------------------------- node estimates

# HyperPod nodes: boot, the lifecycle script and joining EKS, by kind of instance (the large
# accelerated types load more drivers and bring up EFA), the project's typical figures.
BOOT_MINUTES = {"cpu": 10.0, "accelerated": 15.0, "efa-cluster": 20.0}
# Each node past the first: more capacity to find and more chances of a slow one.
PER_EXTRA_NODE_MINUTES = 0.5
EXTRA_NODES_CAP_MINUTES = 15.0
# Deep health checks (OnStartDeepHealthChecks): "a DHC takes around 60-90 minutes to complete"
# (HyperPod docs, Create a NodeClass). We take 75: most of it the stress test (DCGM level 4),
# the rest the NCCL and EFA tests across the group.
DEEP_HEALTH_CHECK_MINUTES = {"InstanceStress": 60.0, "InstanceConnectivity": 15.0}

# The node gate allows this much more than the estimate: with both checks the estimate takes
# 75 minutes of deep health checks, and 1.5 times it covers the documented 90 plus boot.
NODE_WAIT_FACTOR = 1.5
NODE_WAIT_MIN_MINUTES = 30.0
# After the nodes run, the chart's device plugins start on them and advertise the
# accelerators (an image pull and a registration with the kubelet: minutes).
ACCELERATOR_WAIT_MINUTES = 30.0


def node_minutes(*, accelerated: bool, efa_interfaces: int, count: int, checks: tuple[str, ...] | list[str]) -> float:
    """Typical minutes until one instance group's `count` nodes are all Running."""
    if count <= 0:  # Karpenter's groups start empty: nothing to wait for
        return 0.0
    boot = BOOT_MINUTES["cpu"]
    if accelerated:
        boot = BOOT_MINUTES["efa-cluster" if efa_interfaces >= 4 else "accelerated"]
    extra = min(EXTRA_NODES_CAP_MINUTES, PER_EXTRA_NODE_MINUTES * max(0, count - 1))
    return boot + extra + sum(DEEP_HEALTH_CHECK_MINUTES.get(c, 0.0) for c in checks)


def node_wait_minutes(estimate: float) -> float:
    """How long the node gate waits for groups whose slowest estimate is `estimate`."""
    return max(NODE_WAIT_MIN_MINUTES, math.ceil(estimate * NODE_WAIT_FACTOR))


@dataclass(frozen=True)
class Link:
    """One custom resource of a chained wait."""

    index: int  # 1-based
    count: int
    seconds: int

    @property
    def final(self) -> bool:
        return self.index == self.count


def links(total_minutes: float) -> list[Link]:
    """`total_minutes` split into equal links of at most LINK_WAIT_S each."""
    total = int(math.ceil(total_minutes * 60))
    if total <= 0:
        raise ValueError(f"a wait must last more than 0 seconds, not {total}")
    count = math.ceil(total / LINK_WAIT_S)
    each = math.ceil(total / count)
    return [Link(i, count, each) for i in range(1, count + 1)]
