"""Custom-resource handlers (CDK provider framework): wait until every HyperPod instance
group has its configured count of nodes Running, as one link of a chained wait (chain.py).

With NodeProvisioningMode Continuous, AWS::SageMaker::Cluster reports done before any node
exists, so what needs nodes (the add-ons, the job) waits on this resource instead. Runs in
Lambda with the runtime's botocore; the only call is the read-only ListClusterNodes, made
with the timeouts that keep it inside the function's time (chain.client).
"""

from __future__ import annotations

import time
from collections import Counter

from botocore.exceptions import BotoCoreError, ClientError

if __package__:  # imported as infra.handlers.* (the tests)
    from . import chain
else:  # in Lambda the handler folder is the root
    import chain

# ListClusterNodes errors that pass: throttling after botocore's own retries, the service's
# own faults, and a cluster that CloudFormation created but the API does not show yet.
TRANSIENT = {"ThrottlingException", "InternalFailure", "ServiceUnavailable", "ResourceNotFound"}


# ClusterInstanceStatus of a node that MoveClusterNodes takes from one group to another (botocore's
# sagemaker model): moving, not failed. The group it leaves and the one it joins change their counts
# outside CloudFormation, so the wait says it moves instead of counting it missing.
MOVING = ("DetachInProgress", "AttachInProgress")


def on_event(event, _context):
    return chain.start(event, event["ResourceProperties"]["ClusterName"])


def node_states(client, cluster_name: str) -> dict[str, Counter]:
    """Instance group -> count of nodes per status (Running, Pending, ...)."""
    states: dict[str, Counter] = {}
    for page in client.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster_name):
        for node in page["ClusterNodeSummaries"]:
            states.setdefault(node["InstanceGroupName"], Counter())[node["InstanceStatus"]["Status"]] += 1
    return states


def shortfall(wanted: dict[str, int], states: dict[str, Counter]) -> list[str]:
    """One phrase per group with fewer Running nodes than wanted."""
    lines = []
    for group, count in sorted(wanted.items()):
        have = states.get(group, Counter())
        if have["Running"] < count:
            others = ", ".join(f"{n} {status}" for status, n in sorted(have.items()) if status != "Running" and status not in MOVING)
            moving = sum(have[status] for status in MOVING)
            others += (", " if others and moving else "") + (f"{moving} moving between groups (MoveClusterNodes: its counts "
                                                             "change outside CloudFormation)" if moving else "")
            lines.append(f"{group} has {have['Running']} of {count} Running" + (f" ({others})" if others else ""))
    return lines


def is_complete(event, context, client=None, now=time.time):
    props = event["ResourceProperties"]
    name, region = props["ClusterName"], props["Region"]
    wanted = {group: int(count) for group, count in props["InstanceGroups"].items()}

    def check() -> list[str]:
        try:
            return shortfall(wanted, node_states(client or chain.client("sagemaker", region, context), name))
        except ClientError as err:
            if err.response["Error"]["Code"] in TRANSIENT:
                raise chain.NotYet(f"ListClusterNodes: {err}") from err
            raise
        except BotoCoreError as err:  # connection errors and timeouts
            raise chain.NotYet(f"ListClusterNodes: {err}") from err

    def timed_out(missing: list[str], error: str | None, minutes: int) -> str:
        return (
            f"HyperPod cluster {name}: nodes not ready after {minutes} min: {'; '.join(missing)}"
            + (f" (last error: {error})" if error else "")
            + f". Look: aws sagemaker list-cluster-nodes --cluster-name {name} --region {region}; "
            f"a node's lifecycle-script and health-check logs are in CloudWatch under /aws/sagemaker/Clusters/{name}/"
        )

    return chain.poll(event, check, timed_out, now=now)
