"""The network: a new or an existing VPC, the HyperPod subnets, NAT and interface endpoints,
and the facts their ranges, sizes and routes are held to (the checks: infra/checks/network.py)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal, Optional, Union

from pydantic import Field, StringConstraints

from infra.config.base import Model


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


# EKS's max-pods guidance for the VPC CNI: 110 pods per node under 30 vCPUs, 250 above.
# Each pod takes an address of its node's subnet; AWS keeps 5 addresses of every subnet.
SUBNET_RESERVED = 5
