"""Custom-resource handlers (CDK provider framework): when the network stack is deleted, wait
until no network interface is left that holds what it deletes, before CloudFormation deletes
the subnets, the security group and the VPC. Create and Update do nothing.

Interfaces that outlive what made them, whatever made them:
- Lambda's Hyperplane interfaces of functions in a VPC (the kubectl provider, the accelerator
  gate), released up to 20 minutes after the function is gone (Lambda developer guide, VPC
  networking); requester-managed, so nobody else may delete them.
- The VPC CNI's interfaces on HyperPod nodes, made through the execution role in the HyperPod
  subnet with the EFA group, and the interfaces HyperPod itself attaches to its instances:
  released when HyperPod has terminated the nodes, which may be after the cluster's deletion
  has returned.
- An interface whose owner is gone and that was never deleted (`available`): nobody releases it.
Until they are gone the subnets and the security group cannot be deleted (DependencyViolation)
and `cdk destroy` ends in DELETE_FAILED. So in a VPC of this stack's own every interface in the
VPC is waited for (the VPC goes too); the endpoints' and NAT gateways' are deleted by
CloudFormation beside this wait, and nothing that owns an interface is deleted after it.

In an existing VPC the subnets stay, and other owners' interfaces in them are their business:
only interfaces holding this stack's security group are waited for, and where that group is
an existing one too, nothing is deleted and there is no wait.

Where the VPC is this stack's own, it also removes what GuardDuty Runtime Monitoring's
automated agent added to it: a `guardduty-data` interface endpoint and a security group, both
tagged `GuardDutyManaged` (GuardDuty's service-linked role may create only such endpoints and
groups: AmazonGuardDutyServiceRolePolicy). The endpoint's interfaces keep the subnets in use
and the group the VPC; nothing else is touched, and the role that deletes may delete only
resources carrying that tag.
"""

from __future__ import annotations

import time

from botocore.exceptions import BotoCoreError, ClientError

if __package__:  # imported as infra.handlers.* (the tests)
    from . import chain
else:  # in Lambda the handler folder is the root
    import chain

def on_event(event, _context):
    return chain.start(event, f"teardown-{event['ResourceProperties']['VpcId']}", on_delete=True)


def interface_filters(vpc_id: str, group_id: str | None = None) -> list[dict]:
    """DescribeNetworkInterfaces' filters for what holds the VPC: every interface in it, or
    with `group_id` those holding that group (any type: Lambda's, the VPC CNI's, HyperPod's)."""
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}]
    if group_id:
        filters.append({"Name": "group-id", "Values": [group_id]})
    return filters


def interfaces(client, filters: list[dict]) -> list[dict]:
    pages = client.get_paginator("describe_network_interfaces").paginate(Filters=filters)
    return [eni for page in pages for eni in page["NetworkInterfaces"]]


def described(eni: dict) -> str:
    """One interface in words: what it is, who made it, what it is attached to."""
    made_by = f"requester {eni['RequesterId']}" if eni.get("RequesterManaged") and eni.get("RequesterId") else "made in this account"
    attached = eni.get("Attachment", {}).get("InstanceId")
    return (
        f"{eni['NetworkInterfaceId']} ({eni.get('InterfaceType', 'interface')}, {eni['Status']}, {made_by}"
        + (f", attached to {attached}" if attached else "")
        + (f", {eni['Description']!r}" if eni.get("Description") else "")
        + ")"
    )


def describe_command(region: str, filters: list[dict]) -> str:
    """The AWS CLI command that lists what the wait still found, with the same filters."""
    named = " ".join(f"Name={f['Name']},Values={','.join(f['Values'])}" for f in filters)
    return (
        f"aws ec2 describe-network-interfaces --region {region} --filters {named} --query "
        "'NetworkInterfaces[].[NetworkInterfaceId,InterfaceType,Status,RequesterId,Attachment.InstanceId,Description]' --output table"
    )


GUARDDUTY_TAG = "GuardDutyManaged"


def guardduty_endpoints(client, vpc_id: str) -> list[dict]:
    """GuardDuty's own endpoints in the VPC, not yet deleted: tagged by it and for its
    guardduty-data service (or its FIPS twin), the only ones its role may create."""
    pages = client.get_paginator("describe_vpc_endpoints").paginate(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "tag-key", "Values": [GUARDDUTY_TAG]}]
    )
    return [
        e for page in pages for e in page["VpcEndpoints"]
        if e["ServiceName"].endswith((".guardduty-data", ".guardduty-data-fips")) and e["State"].lower() != "deleted"
    ]


def guardduty_security_groups(client, vpc_id: str) -> list[dict]:
    pages = client.get_paginator("describe_security_groups").paginate(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "tag-key", "Values": [GUARDDUTY_TAG]}]
    )
    return [g for page in pages for g in page["SecurityGroups"]]


def remove_guardduty(client, vpc_id: str) -> list[str]:
    """One step of removing GuardDuty's endpoint, then its security group (the endpoint's
    interfaces hold the group until they are gone); what is still there."""
    endpoints = guardduty_endpoints(client, vpc_id)
    live = [e["VpcEndpointId"] for e in endpoints if e["State"].lower() != "deleting"]
    if live:
        client.delete_vpc_endpoints(VpcEndpointIds=live)
    if endpoints:
        return [f"{e['VpcEndpointId']} (GuardDuty endpoint, deleting)" for e in endpoints]
    left = []
    for group in guardduty_security_groups(client, vpc_id):
        try:
            client.delete_security_group(GroupId=group["GroupId"])
        except ClientError as err:
            if err.response["Error"]["Code"] != "DependencyViolation":
                raise
            left.append(f"{group['GroupId']} (GuardDuty security group, still in use)")
    return left


def is_complete(event, context, client=None, now=time.time):
    props = event["ResourceProperties"]
    vpc_id = props["VpcId"]
    filters = interface_filters(vpc_id, props["SecurityGroupId"] if props.get("OnlyInterfacesOfTheGroup") == "true" else None)

    def check() -> list[str]:
        ec2 = client or chain.client("ec2", props["Region"], context)
        try:
            guardduty = remove_guardduty(ec2, vpc_id) if props.get("RemoveGuardDuty") == "true" else []
            left = interfaces(ec2, filters)
        except (ClientError, BotoCoreError) as err:
            raise chain.NotYet(f"EC2: {err}") from err
        return guardduty + [described(eni) for eni in left]

    def timed_out(missing, error, minutes):
        return (
            f"VPC {vpc_id}: still in use after {minutes} min by {len(missing)}: {'; '.join(missing[:5])}"
            + (f" (last error: {error})" if error else "")
            + ". Their owners release in-use ones (Lambda up to 20 min after its function, HyperPod once its nodes are "
            "terminated): run cdk destroy again later. An available one whose owner is gone stays until deleted: "
            "aws ec2 delete-network-interface --network-interface-id <id>. "
            f"Look: {describe_command(props['Region'], filters)}"
        )

    return chain.poll(event, check, timed_out, on_delete=True, now=now)
