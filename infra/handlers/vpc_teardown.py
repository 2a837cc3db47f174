"""Custom-resource handlers (CDK provider framework): when the network stack is deleted, wait
until no Lambda network interface is left in its subnets, before CloudFormation deletes them.

Functions in a VPC (the kubectl provider, the accelerator gate) use Hyperplane interfaces
that Lambda releases only after the function is gone, up to 20 minutes later (Lambda
developer guide, VPC networking); they are requester-managed, so nobody else may delete
them. Until then the subnets and the security group cannot be deleted (DependencyViolation)
and `cdk destroy` ends in DELETE_FAILED. Create and Update do nothing.

In an existing VPC the subnets are not deleted and other functions' interfaces in them are
their owners' business: only interfaces holding this stack's security group are waited for,
and where that group is an existing one too, nothing is deleted and there is no wait.

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

LAMBDA_INTERFACE = "lambda"


def on_event(event, _context):
    return chain.start(event, f"teardown-{event['ResourceProperties']['VpcId']}", on_delete=True)


def lambda_interfaces(client, vpc_id: str, subnet_ids: list[str], group_id: str | None = None) -> list[dict]:
    """Lambda's interfaces in these subnets; with `group_id`, only those holding that group."""
    filters = [
        {"Name": "vpc-id", "Values": [vpc_id]},
        {"Name": "subnet-id", "Values": subnet_ids},
        {"Name": "interface-type", "Values": [LAMBDA_INTERFACE]},
    ]
    if group_id:
        filters.append({"Name": "group-id", "Values": [group_id]})
    pages = client.get_paginator("describe_network_interfaces").paginate(Filters=filters)
    return [eni for page in pages for eni in page["NetworkInterfaces"]]


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
    vpc_id, subnets = props["VpcId"], list(props["SubnetIds"])

    def check() -> list[str]:
        ec2 = client or chain.client("ec2", props["Region"], context)
        try:
            guardduty = remove_guardduty(ec2, vpc_id) if props.get("RemoveGuardDuty") == "true" else []
            only = props["SecurityGroupId"] if props.get("OnlyInterfacesOfTheGroup") == "true" else None
            left = lambda_interfaces(ec2, vpc_id, subnets, only)
        except (ClientError, BotoCoreError) as err:
            raise chain.NotYet(f"EC2: {err}") from err
        return guardduty + [f"{eni['NetworkInterfaceId']} ({eni.get('Description', '')}, {eni['Status']})" for eni in left]

    def timed_out(missing, error, minutes):
        return (
            f"VPC {vpc_id}: still in use after {minutes} min by: {'; '.join(missing[:5])}"
            + (f" (last error: {error})" if error else "")
            + ". Lambda releases them after their function is deleted; run cdk destroy again in a few minutes. "
            f"Look: aws ec2 describe-network-interfaces --filters Name=vpc-id,Values={vpc_id} Name=interface-type,Values=lambda"
        )

    return chain.poll(event, check, timed_out, on_delete=True, now=now)
