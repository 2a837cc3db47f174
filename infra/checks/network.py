"""The network's rules that span fields: availability zones and their IDs, the VPC's and
subnets' ranges, sizes and routes, the HyperPod subnets' room for the nodes' pods, an
existing VPC."""

from __future__ import annotations

import ipaddress
import re

from infra import catalogue
from infra.config.base import Problems, duplicates
from infra.config.network import AVOID, ENDPOINT_SERVICES, LINK_LOCAL, SUBNET_RESERVED, SUBNET_SIZES, association_refused, zone_id_prefix
from infra.config.settings import Settings


def _az_checks(s: Settings, p: Problems):
    from infra import cfn_schema

    # An unknown region is its own line (check_region); its zones would only repeat it, one line each.
    known = cfn_schema.known_region(s.region)
    for i, az in enumerate(s.availability_zones if known else ()):
        if not (az.startswith(s.region) and re.fullmatch(r"[a-z]", az[len(s.region) :])):
            p.error(f"availability_zones[{i}]", az, f"must be a zone of region {s.region}, like {s.region}a")
    for az in duplicates(s.availability_zones):
        p.error("availability_zones", az, "is listed twice")
    ids = s.availability_zone_ids
    if ids is not None and len(ids) != len(s.availability_zones):
        p.error("availability_zone_ids", list(ids), f"needs one zone ID per availability zone ({len(s.availability_zones)}), same order")
    for i, zid in enumerate(ids or ()):
        if not re.fullmatch(r"[a-z]{2,5}\d-az\d+", zid):
            p.error(f"availability_zone_ids[{i}]", zid, "is not a zone ID like use1-az4")
        elif zid.split("-az")[0] != zone_id_prefix(s.region):
            p.error(f"availability_zone_ids[{i}]", zid, f"is a zone of another region; {s.region}'s zone IDs start {zone_id_prefix(s.region)}-az")
    for zid in duplicates(ids or ()):
        p.error("availability_zone_ids", zid, "is listed twice")


def _planned_primary_subnets(s: Settings) -> list[ipaddress.IPv4Network] | None:
    """The subnets ec2.Vpc allocates from vpc_cidr: public then private, one per AZ, in order."""
    net = s.network
    cursor = int(net.vpc_cidr.network_address)
    planned = []
    for mask in [net.public_subnet_mask] * len(s.availability_zones) + [net.private_subnet_mask] * len(
        s.availability_zones
    ):
        size = 2 ** (32 - mask)
        cursor = (cursor + size - 1) // size * size
        subnet = ipaddress.IPv4Network((cursor, mask))
        if not subnet.subnet_of(net.vpc_cidr):
            return None
        planned.append(subnet)
        cursor += size
    return planned


def _max_pods(vcpus: int) -> int:
    return 110 if vcpus < 30 else 250


def _check_subnet_capacity(s: Settings, p: Problems):
    """Each node needs an address, and each of its pods another, from its HyperPod subnet."""
    default_az = s.network.hyperpod_subnets[0].availability_zone if s.network.hyperpod_subnets else None
    for i, sn in enumerate(s.network.hyperpod_subnets):
        if sn.cidr is None:
            continue  # an existing subnet: its free addresses are the account's to know (preflight)
        groups = [g for g in s.hyperpod.instance_groups if (g.availability_zone or default_az) == sn.availability_zone]
        known = [g for g in groups if catalogue.figures(g.instance_type)]  # the others: warned per group
        usable = sn.cidr.num_addresses - SUBNET_RESERVED
        nodes = sum(g.ceiling for g in groups)
        at_density = sum(g.ceiling * (1 + _max_pods(g.spec.vcpus)) for g in known)
        if nodes > usable:
            p.error(f"network.hyperpod_subnets[{i}].cidr", str(sn.cidr), f"has {usable} usable addresses for {nodes} nodes")
        elif at_density > usable:
            p.warn(
                f"network.hyperpod_subnets[{i}].cidr: {sn.cidr} has {usable} usable addresses; its {nodes} nodes at EKS's "
                f"max-pods density need {at_density}; pods beyond that stay Pending"
            )


def check_network(s: Settings, p: Problems):
    _az_checks(s, p)
    _check_subnet_capacity(s, p)
    net = s.network
    if net.existing_vpc and net.nat_gateways is not None:
        p.error("network.nat_gateways", net.nat_gateways, "must be left out with existing_vpc: that VPC brings its own routes and no NAT gateway is created")
    elif net.nat_count > len(s.availability_zones):
        p.error("network.nat_gateways", net.nat_gateways, f"must be at most the number of AZs ({len(s.availability_zones)})")
    if isinstance(net.interface_endpoints, tuple):
        for i, service in enumerate(net.interface_endpoints):
            if service not in ENDPOINT_SERVICES:
                p.error(f"network.interface_endpoints[{i}]", service, f"is not a service the platform calls; choose from: {', '.join(ENDPOINT_SERVICES)}")
        for service in duplicates(net.interface_endpoints):
            p.error("network.interface_endpoints", service, "is listed twice")
    if net.closed:
        # Which endpoints and which API endpoint access it needs: infra/prerequisites.py.
        p.warn(
            "network.nat_gateways: 0 - no internet access: the chart's images are copied into ECR at deploy, the "
            "sample job reads its text and tokenizer from /fsx, and the training image is built and pushed from "
            "the machine that runs cdk deploy"
        )
    for az in duplicates(sn.availability_zone for sn in net.hyperpod_subnets):
        p.error("network.hyperpod_subnets", az, "has two subnets in the same AZ; give one per AZ")
    for i, sn in enumerate(net.hyperpod_subnets):
        if sn.availability_zone not in s.availability_zones:
            p.error(
                f"network.hyperpod_subnets[{i}].availability_zone",
                sn.availability_zone,
                f"is not one of availability_zones ({', '.join(s.availability_zones)})",
            )
    for i, block in enumerate(net.cidr_blocks):
        where = "network.vpc_cidr" if not net.existing_vpc and i == 0 else "network.existing_vpc.vpc_cidr" if i == 0 else (
            f"network.existing_vpc.secondary_cidrs[{i - 1}]" if net.existing_vpc else f"network.secondary_cidrs[{i - 1}]")
        if block.overlaps(LINK_LOCAL):
            p.error(where, str(block), "overlaps 169.254.0.0/16, link-local, which a VPC cannot use")
        elif block.overlaps(AVOID):
            p.error(where, str(block), "overlaps 172.17.0.0/16, which the VPC user guide says not to use: SageMaker uses it (and Docker's default bridge)")
    if net.existing_vpc:
        _check_existing_vpc(s, p)
        return
    for i, sn in enumerate(net.hyperpod_subnets):
        if sn.cidr is None or sn.subnet_id is not None:
            p.error(f"network.hyperpod_subnets[{i}]", sn.subnet_id, "needs cidr (and no subnet_id) for a new VPC")
    if net.vpc_cidr.prefixlen > 24 or net.vpc_cidr.prefixlen < 16:
        p.error("network.vpc_cidr", str(net.vpc_cidr), "must be a /16 to /24 block (VPC size limits)")
    blocks = [net.vpc_cidr, *net.secondary_cidrs]
    for i, block in enumerate(net.secondary_cidrs):
        if not 16 <= block.prefixlen <= 28:
            p.error(f"network.secondary_cidrs[{i}]", str(block), "must be a /16 to /28 block")
        elif association_refused(net.vpc_cidr, block):
            p.error(
                f"network.secondary_cidrs[{i}]", str(block),
                f"cannot be added to a VPC whose primary block is {net.vpc_cidr}: {association_refused(net.vpc_cidr, block)} "
                "(VPC user guide, IPv4 CIDR block association restrictions)",
            )
        for j, other in enumerate(blocks[: i + 1]):
            if block.overlaps(other):
                where = "vpc_cidr" if j == 0 else f"secondary_cidrs[{j - 1}]"
                p.error(f"network.secondary_cidrs[{i}]", str(block), f"overlaps network.{where} ({other})")
    planned = _planned_primary_subnets(s)
    if planned is None:
        p.error(
            "network.vpc_cidr",
            str(net.vpc_cidr),
            f"is too small for {len(s.availability_zones)} public /{net.public_subnet_mask} and "
            f"{len(s.availability_zones)} private /{net.private_subnet_mask} subnets",
        )
        planned = []
    for i, sn in enumerate(net.hyperpod_subnets):
        if sn.cidr is None:
            continue
        if not SUBNET_SIZES[0] <= sn.cidr.prefixlen <= SUBNET_SIZES[1]:
            p.error(f"network.hyperpod_subnets[{i}].cidr", str(sn.cidr), f"must be a /{SUBNET_SIZES[0]} to /{SUBNET_SIZES[1]} block (EC2 subnet sizes)")
            continue
        if not any(sn.cidr.subnet_of(b) for b in blocks):
            p.error(
                f"network.hyperpod_subnets[{i}].cidr",
                str(sn.cidr),
                f"is outside the VPC CIDRs ({', '.join(map(str, blocks))})",
            )
        for used in planned:
            if sn.cidr.overlaps(used):
                p.error(
                    f"network.hyperpod_subnets[{i}].cidr",
                    str(sn.cidr),
                    f"overlaps the EKS/public subnet {used} allocated from vpc_cidr; use a secondary CIDR",
                )
                break
        for j, other in enumerate(net.hyperpod_subnets[:i]):
            if other.cidr is not None and sn.cidr.overlaps(other.cidr):
                p.error(f"network.hyperpod_subnets[{i}].cidr", str(sn.cidr), f"overlaps hyperpod_subnets[{j}]")


def _check_existing_vpc(s: Settings, p: Problems):
    ev = s.network.existing_vpc
    n = len(s.availability_zones)
    # One subnet per zone: a subnet given twice would silently give EKS fewer zones than listed.
    for subnet in duplicates(ev.private_subnet_ids):
        p.error("network.existing_vpc.private_subnet_ids", subnet, "is listed twice; each zone needs its own subnet")
    for subnet in duplicates(sn.subnet_id for sn in s.network.hyperpod_subnets if sn.subnet_id):
        p.error("network.hyperpod_subnets", subnet, "is listed twice; each zone needs its own subnet")
    if len(ev.private_subnet_ids) != n:
        p.error(
            "network.existing_vpc.private_subnet_ids",
            list(ev.private_subnet_ids),
            f"needs one subnet per availability zone ({n}), in the same order",
        )
    if len(ev.private_subnet_route_table_ids) != len(ev.private_subnet_ids):
        p.error(
            "network.existing_vpc.private_subnet_route_table_ids",
            list(ev.private_subnet_route_table_ids),
            "needs one route table per private subnet",
        )
    for i, sn in enumerate(s.network.hyperpod_subnets):
        if sn.subnet_id is None or sn.cidr is not None:
            p.error(f"network.hyperpod_subnets[{i}]", sn.cidr and str(sn.cidr), "needs subnet_id (and no cidr) for an existing VPC")
        elif ev.s3_gateway_endpoint and sn.route_table_id is None:
            p.error(
                f"network.hyperpod_subnets[{i}].route_table_id",
                None,
                "is required with network.existing_vpc.s3_gateway_endpoint (the endpoint's route goes into it); "
                "or set s3_gateway_endpoint false where the VPC has one",
            )
