"""What waits on deletion, held against the services' own models (botocore's Stubber, which
validates every response): the FSx final backup, taken only on delete and waited for, and the
VPC teardown, which waits for every network interface that holds the VPC and removes what
GuardDuty added to it."""

from __future__ import annotations

import json

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber
from tests.infra.gate_events import GROUP, SUBNET, VPC, backup_event, link_event, set_handler_environment, teardown_event


@pytest.fixture(autouse=True)
def handler_environment(monkeypatch):
    set_handler_environment(monkeypatch)


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


def test_a_final_backup_is_taken_only_on_delete_and_waited_for_until_available():
    from infra.handlers import fsx_backup

    assert fsx_backup.is_complete(backup_event("Create"), None, client=object()) == {"IsComplete": True}
    assert fsx_backup.on_event(backup_event("Create"), None) == {"PhysicalResourceId": "final-backup-fs-0123456789abcdef0"}
    assert "Deadline" in fsx_backup.on_event(backup_event("Delete"), None)["Data"]
    assert fsx_backup.is_complete(backup_event(), None, client=_fsx("CREATING")) == {"IsComplete": False}
    # A daily automatic backup in progress only delays it.
    assert fsx_backup.is_complete(backup_event(), None, client=_fsx("BackupInProgress")) == {"IsComplete": False}
    assert fsx_backup.is_complete(backup_event(), None, client=_fsx("AVAILABLE")) == {"IsComplete": True}
    with pytest.raises(RuntimeError, match="is FAILED"):
        fsx_backup.is_complete(backup_event(), None, client=_fsx("FAILED"))
    with pytest.raises(TimeoutError, match="The file system is kept: run cdk destroy again once `aws fsx describe-backups --backup-ids backup-0a1b2c3d4e5f60718`"):
        fsx_backup.is_complete(backup_event(deadline=1), None, client=_fsx("CREATING"), now=lambda: 2)
    # FSx's ClientRequestToken: at most 63 of [A-Za-z0-9_.-] (its API reference).
    import re

    assert re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", fsx_backup.token("fs-" + "0" * 60))


# ---------------------------------------------------------------- VPC teardown


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

    assert vpc_teardown.is_complete(teardown_event("Create"), None, client=object()) == {"IsComplete": True}
    assert vpc_teardown.is_complete(teardown_event(), None, client=_ec2(LINGERING)) == {"IsComplete": False}
    assert vpc_teardown.is_complete(teardown_event(), None, client=_ec2([])) == {"IsComplete": True}
    with pytest.raises(TimeoutError) as err:
        vpc_teardown.is_complete(teardown_event(deadline=1), None, client=_ec2(LINGERING), now=lambda: 2)
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
        own = link_event("Delete", VpcId=vpc, Region="us-east-1", SubnetIds=[subnet], SecurityGroupId=efa)
        existing = link_event("Delete", VpcId=vpc, Region="us-east-1", SubnetIds=[subnet], SecurityGroupId=efa,
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

        event = link_event("Delete", deadline=10**10, VpcId=vpc, Region="us-east-1", SubnetIds=[subnet], SecurityGroupId=ours,
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
        event = link_event("Delete", deadline=10**10, VpcId=other_vpc, Region="us-east-1", SubnetIds=[other_subnet], SecurityGroupId=ours,
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
    assert vpc_teardown.is_complete(teardown_event(OnlyInterfacesOfTheGroup="true"), None, client=client) == {"IsComplete": True}
