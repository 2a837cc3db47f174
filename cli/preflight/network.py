"""The network a deploy builds in: the availability zones config names as this account maps
them, and what an existing VPC already holds (its endpoints, its HyperPod subnets' free
addresses, the security group config hands in)."""

from __future__ import annotations

from cli.preflight.base import Clients, Result, error_code
from infra.config import Settings


def check_zones(settings: Settings, aws: Clients) -> list[Result]:
    zones = {z["ZoneName"]: z["ZoneId"] for z in aws("ec2").describe_availability_zones(AllAvailabilityZones=False)["AvailabilityZones"]}
    results = []
    expected = dict(zip(settings.availability_zones, settings.availability_zone_ids or ()))
    for az in settings.availability_zones:
        if az not in zones:
            results.append(Result(f"zone {az}", "fail", f"not offered in {aws.region}", f"pick zones from: {', '.join(sorted(zones))}"))
        elif az in expected and zones[az] != expected[az]:
            results.append(
                Result(
                    f"zone {az}",
                    "fail",
                    f"is {zones[az]} in this account, config expects {expected[az]}",
                    f"use the zone name that maps to {expected[az]} (zone names differ per account)",
                )
            )
        elif az in expected:
            results.append(Result(f"zone {az}", "pass", f"is {zones[az]} as expected"))
        else:
            results.append(
                Result(f"zone {az}", "warn", f"is {zones[az]} in this account", "pin it in availability_zone_ids to catch a remapped account")
            )
    return results


def check_existing_vpc_endpoints(settings: Settings, aws: Clients) -> list[Result]:
    """An endpoint the existing VPC already has fails the one the network stack would add: a
    second S3 gateway on the same route table, or a second interface endpoint with private DNS
    ("private-dns-enabled cannot be set because there is already a conflicting DNS domain")."""
    ev = settings.network.existing_vpc
    if ev is None:
        return []
    have = aws("ec2").describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [ev.vpc_id]}])["VpcEndpoints"]
    prefix = f"com.amazonaws.{aws.region}."
    results = []
    if ev.s3_gateway_endpoint:
        ours = {*ev.private_subnet_route_table_ids, *(sn.route_table_id for sn in settings.network.hyperpod_subnets if sn.route_table_id)}
        taken = sorted({rt for e in have if e["ServiceName"] == prefix + "s3" and e.get("VpcEndpointType") == "Gateway"
                        for rt in e.get("RouteTableIds", []) if rt in ours})
        results.append(
            Result("endpoint s3", "fail", f"{ev.vpc_id} already has an S3 gateway endpoint on {', '.join(taken)}",
                   "set network.existing_vpc.s3_gateway_endpoint to false")
            if taken
            else Result("endpoint s3", "pass", "no S3 gateway endpoint on these route tables yet")
        )
    for service in settings.network.endpoint_services:
        clash = [e["VpcEndpointId"] for e in have if e["ServiceName"] == prefix + service and e.get("PrivateDnsEnabled")]
        results.append(
            Result(f"endpoint {service}", "fail", f"{ev.vpc_id} already has {', '.join(clash)} with private DNS; a second one fails",
                   f"list network.interface_endpoints without {service}")
            if clash
            else Result(f"endpoint {service}", "pass", "not in the VPC yet")
        )
    return results


def check_existing_subnets(settings: Settings, aws: Clients) -> list[Result]:
    """Each existing HyperPod subnet has a free address for every node and, to run pods at
    EKS's max-pods density, one per pod (the VPC CNI gives each pod a subnet address)."""
    from infra import catalogue
    from infra.checks.network import _max_pods

    subnets = [sn for sn in settings.network.hyperpod_subnets if sn.subnet_id]
    if not subnets:
        return []
    free = {s["SubnetId"]: s["AvailableIpAddressCount"] for s in aws("ec2").describe_subnets(SubnetIds=[sn.subnet_id for sn in subnets])["Subnets"]}
    default_az = settings.network.hyperpod_subnets[0].availability_zone
    results = []
    for sn in subnets:
        groups = [g for g in settings.hyperpod.instance_groups if (g.availability_zone or default_az) == sn.availability_zone]
        nodes = sum(g.ceiling for g in groups)
        dense = sum(g.ceiling * (1 + _max_pods(g.spec.vcpus)) for g in groups if catalogue.figures(g.instance_type))
        have, check = free.get(sn.subnet_id, 0), f"subnet {sn.subnet_id}"
        if have < nodes:
            results.append(Result(check, "fail", f"{have} free addresses for {nodes} nodes in {sn.availability_zone}",
                                  "free addresses there, or give a larger subnet in network.hyperpod_subnets"))
        elif have < dense:
            results.append(Result(check, "warn", f"{have} free addresses; {nodes} nodes at EKS's max-pods density need {dense}",
                                  "pods beyond that stay Pending; a larger subnet avoids it"))
        else:
            results.append(Result(check, "pass", f"{have} free addresses for {nodes} nodes and their pods"))
    return results


def check_existing_security_group(settings: Settings, aws: Clients) -> list[Result]:
    """network.existing_security_group_id has the rules the stack gives a group it creates (as
    both references do): all traffic from and to itself (EFA, which a 0.0.0.0/0 rule does not
    cover; Lustre's 988 and 1018-1023) and all egress (AWS APIs, registries)."""
    group_id = settings.network.existing_security_group_id
    if not group_id:
        return []
    try:
        (group,) = aws("ec2").describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    except Exception as err:  # noqa: BLE001
        if error_code(err) != "InvalidGroup.NotFound":
            raise
        return [Result(f"security group {group_id}", "fail", f"does not exist in {aws.region}", "fix network.existing_security_group_id")]

    def every_protocol(rules: list[dict], *, to_self: bool = False, anywhere: bool = False) -> bool:
        return any(
            r.get("IpProtocol") == "-1"
            and ((to_self and any(p.get("GroupId") == group_id for p in r.get("UserIdGroupPairs", [])))
                 or (anywhere and any(c.get("CidrIp") == "0.0.0.0/0" for c in r.get("IpRanges", []))))
            for r in rules
        )

    check, vpc = f"security group {group_id}", settings.network.existing_vpc.vpc_id
    if group.get("VpcId") != vpc:
        return [Result(check, "fail", f"is in {group.get('VpcId')}, not network.existing_vpc {vpc}", "name a group of that VPC")]
    needs = (
        ("all traffic from itself", every_protocol(group.get("IpPermissions", []), to_self=True),
         f"aws ec2 authorize-security-group-ingress --group-id {group_id} --ip-permissions IpProtocol=-1,UserIdGroupPairs=[{{GroupId={group_id}}}]"),
        ("all traffic to itself (EFA)", every_protocol(group.get("IpPermissionsEgress", []), to_self=True),
         f"aws ec2 authorize-security-group-egress --group-id {group_id} --ip-permissions IpProtocol=-1,UserIdGroupPairs=[{{GroupId={group_id}}}]"),
        ("all egress", every_protocol(group.get("IpPermissionsEgress", []), anywhere=True),
         f"aws ec2 authorize-security-group-egress --group-id {group_id} --ip-permissions IpProtocol=-1,IpRanges=[{{CidrIp=0.0.0.0/0}}]"),
    )
    return [
        Result(f"{check} {what}", "pass", "allowed") if present else Result(f"{check} {what}", "fail", "missing: HyperPod nodes need it", command)
        for what, present, command in needs
    ]
