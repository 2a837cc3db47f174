"""Custom-resource handlers (CDK provider framework): when the network stack is deleted, wait
until no Lambda network interface is left in its subnets, before CloudFormation deletes them.

Functions in a VPC (the kubectl provider, the accelerator gate) use Hyperplane interfaces
that Lambda releases only after the function is gone, up to 20 minutes later (Lambda
developer guide, VPC networking); they are requester-managed, so nobody else may delete
them. Until then the subnets and the security group cannot be deleted (DependencyViolation)
and `cdk destroy` ends in DELETE_FAILED. Create and Update do nothing.
"""

from __future__ import annotations

import time

import boto3
from botocore.exceptions import BotoCoreError, ClientError

if __package__:  # imported as infra.handlers.* (the tests)
    from . import chain
else:  # in Lambda the handler folder is the root
    import chain

LAMBDA_INTERFACE = "lambda"


def on_event(event, _context):
    return chain.start(event, f"teardown-{event['ResourceProperties']['VpcId']}", on_delete=True)


def lambda_interfaces(client, vpc_id: str, subnet_ids: list[str]) -> list[dict]:
    pages = client.get_paginator("describe_network_interfaces").paginate(
        Filters=[
            {"Name": "vpc-id", "Values": [vpc_id]},
            {"Name": "subnet-id", "Values": subnet_ids},
            {"Name": "interface-type", "Values": [LAMBDA_INTERFACE]},
        ]
    )
    return [eni for page in pages for eni in page["NetworkInterfaces"]]


def is_complete(event, _context, client=None, now=time.time):
    props = event["ResourceProperties"]
    vpc_id, subnets = props["VpcId"], list(props["SubnetIds"])

    def check() -> list[str]:
        try:
            left = lambda_interfaces(client or boto3.client("ec2", region_name=props["Region"]), vpc_id, subnets)
        except (ClientError, BotoCoreError) as err:
            raise chain.NotYet(f"DescribeNetworkInterfaces: {err}") from err
        return [f"{eni['NetworkInterfaceId']} ({eni.get('Description', '')}, {eni['Status']})" for eni in left]

    def timed_out(missing, error, minutes):
        return (
            f"VPC {vpc_id}: Lambda network interfaces still in its subnets after {minutes} min: {'; '.join(missing[:5])}"
            + (f" (last error: {error})" if error else "")
            + ". Lambda releases them after their function is deleted; run cdk destroy again in a few minutes. "
            f"Look: aws ec2 describe-network-interfaces --filters Name=vpc-id,Values={vpc_id} Name=interface-type,Values=lambda"
        )

    return chain.poll(event, check, timed_out, on_delete=True, now=now)
