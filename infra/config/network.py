"""The network: a new or an existing VPC, the HyperPod subnets, NAT and interface endpoints,
and the checks on their ranges, sizes and routes."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Annotated, Literal, Optional, Union

from pydantic import Field, StringConstraints

from infra import catalogue
from infra.config.base import Model, Problems, duplicates

if TYPE_CHECKING:
    from infra.config.settings import Settings


SubnetId = Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")]


RouteTableId = Annotated[str, StringConstraints(pattern=r"^rtb-[0-9a-f]{8,17}$")]


class HyperPodSubnet(Model):
    """A private subnet for HyperPod nodes, in the AZ where the GPU capacity is."""

    availability_zone: str = Field(description="Zone of the subnet (where the GPU capacity is).")
    cidr: Optional[ipaddress.IPv4Network] = Field(
        default=None, description="New VPC: the subnet's block, inside `vpc_cidr` or one of `secondary_cidrs`."
    )
    subnet_id: Optional[SubnetId] = Field(default=None, description="Existing VPC: the subnet's ID.")
    route_table_id: Optional[RouteTableId] = Field(
        default=None, description="Existing VPC: the subnet's route table, so the S3 gateway endpoint can be attached to it."
    )


class ExistingVpc(Model):
    """Import a VPC by IDs (no lookups). Its subnets must already route to NAT or endpoints."""

    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$", description="The VPC's ID.")
    vpc_cidr: ipaddress.IPv4Network = Field(description="Its primary CIDR block.")
    secondary_cidrs: tuple[ipaddress.IPv4Network, ...] = Field(
        default=(), description="Its other CIDR blocks: interface endpoints admit HTTPS from every block."
    )
    private_subnet_ids: tuple[SubnetId, ...] = Field(
        min_length=2, description="One private subnet per entry of `availability_zones`, in the same order, for EKS."
    )
    private_subnet_route_table_ids: tuple[RouteTableId, ...] = Field(min_length=2, description="Their route tables, in the same order.")
    s3_gateway_endpoint: bool = Field(
        default=True,
        description="An S3 gateway endpoint on those route tables and the HyperPod subnets' (`route_table_id` then required): "
        "lifecycle scripts, checkpoints and ECR image layers are S3 traffic. `false` where the VPC has one there already (a "
        "second one on the same route table fails; `preflight` tells).",
    )


class NetworkSettings(Model):
    vpc_cidr: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.192.0.0/16"),
        description="Primary VPC block (/16-/24); the public and EKS subnets are allocated from it.",
    )
    secondary_cidrs: tuple[ipaddress.IPv4Network, ...] = Field(
        default=(ipaddress.IPv4Network("10.1.0.0/16"),),
        description="Extra VPC blocks; AWS's HyperPod samples put the large node subnet in one.",
    )
    public_subnet_mask: int = Field(default=24, ge=16, le=28, description="Prefix length of each public (NAT) subnet.")
    private_subnet_mask: int = Field(default=20, ge=16, le=28, description="Prefix length of each private EKS subnet.")
    nat_gateways: Optional[int] = Field(
        default=None, ge=0, le=6,
        description="NAT gateways, at most one per AZ; unset: 1 in a new VPC. 0 is a closed network: no NAT and no internet "
        "route, which needs an interface endpoint for each service of what is turned on (all of `\"all\"` but `aps-workspaces` "
        "where observability is off and `secretsmanager` where the job reads no token). Leave it out with `existing_vpc`, which brings its own routes.",
    )
    hyperpod_subnets: tuple[HyperPodSubnet, ...] = Field(
        min_length=1,
        description="Private subnets for the HyperPod nodes, one per AZ, in the AZ where the GPU capacity is; the first is the cluster's default.",
    )
    interface_endpoints: Union[bool, Literal["none", "all"], tuple[str, ...]] = Field(
        default=False,
        description="`true`: endpoints for `sagemaker.api` and `eks-auth`, so the nodes need no NAT for them; `\"all\"`: every "
        "service the nodes and the kubectl Lambda call (`ENDPOINT_SERVICES` in infra/config/network.py: also eks, ec2, "
        "ecr.api, ecr.dkr, sts, logs, monitoring, ssm, ssmmessages, ec2messages, lambda, aps-workspaces and secretsmanager), admitting HTTPS "
        "from every VPC block; `\"none\"` or `false`: none; or a list of those names (an existing VPC that has some already: "
        "`preflight` names them).",
    )
    flow_logs: bool = Field(default=True, description="VPC flow logs (all traffic) to an encrypted log group; on an existing VPC too.")
    existing_vpc: Optional[ExistingVpc] = Field(
        default=None,
        description="Import this VPC by its IDs (no lookups) instead of creating one; its subnets must already route to NAT or endpoints.",
    )
    existing_security_group_id: Optional[str] = Field(
        default=None, pattern=r"^sg-[0-9a-f]{8,17}$",
        description="A security group of `existing_vpc` for the HyperPod nodes (and a new control plane) instead of one the "
        "stack creates. Its rules are its owner's: all traffic to and from itself (EFA, Lustre) and all egress, which "
        "`preflight` checks, with the command for each missing rule. An existing cluster's own group may be it (then no "
        "rule is added).",
    )

    @property
    def nat_count(self) -> int:
        return 0 if self.existing_vpc else (1 if self.nat_gateways is None else self.nat_gateways)

    @property
    def endpoint_services(self) -> tuple[str, ...]:
        if isinstance(self.interface_endpoints, tuple):
            return self.interface_endpoints
        if self.interface_endpoints == "all":
            return ENDPOINT_SERVICES
        return ("sagemaker.api", "eks-auth") if self.interface_endpoints is True else ()

    @property
    def closed(self) -> bool:
        """No NAT in a new VPC: the nodes reach only what the endpoints serve."""
        return not self.existing_vpc and self.nat_count == 0

    @property
    def cidr_blocks(self) -> tuple[ipaddress.IPv4Network, ...]:
        """Every CIDR block of the VPC, new or existing."""
        if self.existing_vpc:
            return (self.existing_vpc.vpc_cidr, *self.existing_vpc.secondary_cidrs)
        return (self.vpc_cidr, *self.secondary_cidrs)


# What HyperPod nodes and the kubectl Lambda call, as interface endpoints (S3 stays a gateway
# endpoint): the SageMaker API and EKS (node registration, the kubectl Lambda), EKS Auth (Pod
# Identity), EC2 (the VPC CNI), ECR (images), STS, CloudWatch Logs and metrics, SSM's three
# (node access); Lambda, because the kubectl provider's framework function runs in the VPC and
# invokes its handler; and Managed Prometheus, where the observability collector writes.
# A network without NAT needs those of what is turned on (infra/prerequisites.py ENDPOINTS).
ENDPOINT_SERVICES = (
    "sagemaker.api", "eks", "eks-auth", "ec2", "ecr.api", "ecr.dkr", "sts", "logs", "monitoring",
    "ssm", "ssmmessages", "ec2messages", "lambda", "aps-workspaces", "secretsmanager",
)


def _az_checks(s: Settings, p: Problems):
    for i, az in enumerate(s.availability_zones):
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


# EC2: an IPv4 subnet is a /16 to /28 block (VPC user guide, "Subnet CIDR blocks").
SUBNET_SIZES = (16, 28)
RFC1918 = tuple(ipaddress.IPv4Network(b) for b in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def rfc1918(block: ipaddress.IPv4Network) -> ipaddress.IPv4Network | None:
    """The RFC 1918 range a block lies in, if any."""
    return next((r for r in RFC1918 if block.subnet_of(r)), None)


_BENCHMARK = ipaddress.IPv4Network("198.19.0.0/16")
_172_31 = ipaddress.IPv4Network("172.31.0.0/16")


def association_refused(primary: ipaddress.IPv4Network, secondary: ipaddress.IPv4Network) -> str | None:
    """Why a VPC whose primary block is `primary` cannot take `secondary` (the VPC user guide's
    association restrictions table), or None."""
    home, other = rfc1918(primary), rfc1918(secondary)
    if home and other and other != home:
        return f"it is in {other}, another RFC 1918 range than the primary's {home}"
    if home and secondary.subnet_of(_BENCHMARK):
        return "198.19.0.0/16 does not go with an RFC 1918 primary"
    if home == RFC1918[1] and secondary.subnet_of(_172_31):
        return "172.31.0.0/16 does not go with a 172.16.0.0/12 primary"
    if not home and other:
        return "a public, 100.64.0.0/10 or 198.19.0.0/16 primary takes no RFC 1918 block"
    return None


# The VPC user guide: don't use 172.17.0.0/16, which some AWS services use (it names SageMaker
# and Cloud9); Docker's default bridge is there too (EKS troubleshooting).
AVOID = ipaddress.IPv4Network("172.17.0.0/16")
LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")


# Zone IDs name the region by its country and the initials of its direction words (AWS RAM,
# "Availability Zone IDs for your AWS resources": use1-az1, apse2-az1, euc1-az2, usgw1-az1).
_DIRECTIONS = {"north": "n", "south": "s", "east": "e", "west": "w", "central": "c", "northeast": "ne",
               "southeast": "se", "northwest": "nw", "southwest": "sw", "gov": "g", "iso": "i", "isob": "ib"}


def zone_id_prefix(region: str) -> str:
    """us-east-1 -> use1, ap-southeast-2 -> apse2, us-gov-west-1 -> usgw1."""
    country, *words, number = region.split("-")
    return country + "".join(_DIRECTIONS.get(w, w[:1]) for w in words) + number


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


# EKS's max-pods guidance for the VPC CNI: 110 pods per node under 30 vCPUs, 250 above.
# Each pod takes an address of its node's subnet; AWS keeps 5 addresses of every subnet.
SUBNET_RESERVED = 5


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
