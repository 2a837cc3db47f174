"""Custom-resource handlers (CDK provider framework): wait until every HyperPod instance
group has its configured count of nodes Running.

With NodeProvisioningMode Continuous, AWS::SageMaker::Cluster reports done before any node
exists, so what needs nodes (the add-ons, the job) waits on this resource instead. Runs in
Lambda with the runtime's boto3; the only call is the read-only ListClusterNodes.
"""

from __future__ import annotations

import time
from collections import Counter

import boto3


def on_event(event, _context):
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    props = event["ResourceProperties"]
    deadline = time.time() + int(props["TimeoutSeconds"])
    return {"PhysicalResourceId": props["ClusterName"], "Data": {"Deadline": str(int(deadline))}}


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
            others = ", ".join(f"{n} {status}" for status, n in sorted(have.items()) if status != "Running")
            lines.append(f"{group} has {have['Running']} of {count} Running" + (f" ({others})" if others else ""))
    return lines


def is_complete(event, _context, client=None, now=time.time):
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    props = event["ResourceProperties"]
    name, region = props["ClusterName"], props["Region"]
    wanted = {group: int(count) for group, count in props["InstanceGroups"].items()}
    client = client or boto3.client("sagemaker", region_name=region)
    missing = shortfall(wanted, node_states(client, name))
    if not missing:
        return {"IsComplete": True}
    if now() >= float(event["Data"]["Deadline"]):
        minutes = int(props["TimeoutSeconds"]) // 60
        raise TimeoutError(
            f"HyperPod cluster {name}: nodes not ready after {minutes} min: {'; '.join(missing)}. "
            f"Look: aws sagemaker list-cluster-nodes --cluster-name {name} --region {region}; "
            f"a node's lifecycle-script and health-check logs are in CloudWatch under /aws/sagemaker/Clusters/{name}/"
        )
    return {"IsComplete": False}
