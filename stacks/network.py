"""`<prefix>-<env>-network`: the VPC, the HyperPod node subnets and the EFA security group."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from infra import compliance, naming, readiness, timing
from infra.config import Settings
from infra.stack import PlatformStack


class NetworkStack(PlatformStack):
    def __init__(self, scope: Construct, *, settings: Settings):
        super().__init__(scope, "network", settings=settings, description="VPC, HyperPod subnets and EFA security group")
        cdk.Validations.of(self).acknowledge(
            cdk.Acknowledgment(
                id="CloudFormation-Validate::W3010",
                reason="AZs are explicit by design: synth stays offline, and GPU capacity is bought in one named AZ",
            )
        )
        net = settings.network
        self.logs_key = self._logs_key()
        if settings.uses_existing_vpc:
            self.vpc = self._import_vpc()
            self.hyperpod_subnets = self._import_hyperpod_subnets()
            self.eks_subnets = list(self.vpc.private_subnets)
            if net.existing_vpc.s3_gateway_endpoint:
                self._gateway_endpoint()
        else:
            self.vpc = self._new_vpc()
            # Without NAT the EKS subnets are isolated: no route out but the endpoints.
            self.eks_subnets = list(self.vpc.private_subnets if net.nat_count else self.vpc.isolated_subnets)
            self.hyperpod_subnets = self._new_hyperpod_subnets()
            self._gateway_endpoint()
        if net.flow_logs:  # an existing VPC's too: validation promises flow logs wherever they are on
            self._flow_logs()
        self.efa_security_group = self._efa_security_group()
        if net.endpoint_services:
            self._interface_endpoints()
        self.hyperpod_subnet_by_az = {s.availability_zone: s for s in self.hyperpod_subnets}
        self._wait_for_interfaces_on_delete()
        cdk.CfnOutput(self, "VpcId", value=self.vpc.vpc_id)
        cdk.CfnOutput(self, "EfaSecurityGroupId", value=self.efa_security_group.security_group_id)
        cdk.CfnOutput(
            self, "HyperPodSubnetIds", value=",".join(s.subnet_id for s in self.hyperpod_subnets)
        )
        cdk.CfnOutput(self, naming.VPC_CIDR_BLOCKS_OUTPUT, value=",".join(str(block) for block in net.cidr_blocks))

    # ------------------------------------------------------------------ keys and logs

    def _logs_key(self) -> kms.Key:
        key = self.data_key("LogsKey", "logs", "Encrypts this environment's CloudWatch log groups")
        # CloudWatch Logs encrypts with the key on behalf of log groups in this account only.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(f"logs.{self.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={
                    "ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{self.partition}:logs:{self.region}:{self.account}:*"}
                },
            )
        )
        return key

    # ------------------------------------------------------------------ new VPC

    def _new_vpc(self) -> ec2.Vpc:
        net = self.settings.network
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(str(net.vpc_cidr)),
            availability_zones=list(self.settings.availability_zones),
            nat_gateways=net.nat_count,
            restrict_default_security_group=True,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=net.public_subnet_mask,
                    map_public_ip_on_launch=False,
                    # A closed network has no public subnets, hence no internet gateway.
                    reserved=not net.nat_count,
                ),
                ec2.SubnetConfiguration(
                    name="eks",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS if net.nat_count else ec2.SubnetType.PRIVATE_ISOLATED,
                    cidr_mask=net.private_subnet_mask,
                ),
            ],
        )
        for subnet in vpc.public_subnets:
            compliance.acknowledge(
                subnet,
                "Public subnets hold only the NAT gateways, which need a default route to the internet gateway",
                "NIST.800.53.R5-VPCNoUnrestrictedRouteToIGW",
            )
        self.secondary_cidr_blocks = [
            ec2.CfnVPCCidrBlock(self, f"SecondaryCidr{i}", vpc_id=vpc.vpc_id, cidr_block=str(cidr))
            for i, cidr in enumerate(net.secondary_cidrs)
        ]
        return vpc

    def _nat_gateway_for(self, az: str) -> str:
        with_nat = [s for s in self.vpc.public_subnets if s.node.try_find_child("NATGateway")]
        same_az = [s for s in with_nat if s.availability_zone == az]
        return (same_az or with_nat)[0].node.find_child("NATGateway").ref

    def _new_hyperpod_subnets(self) -> list[ec2.ISubnet]:
        net = self.settings.network
        subnets = []
        for sn in net.hyperpod_subnets:
            subnet = ec2.PrivateSubnet(
                self,
                f"HyperPodSubnet-{sn.availability_zone}",
                availability_zone=sn.availability_zone,
                cidr_block=str(sn.cidr),
                vpc_id=self.vpc.vpc_id,
                map_public_ip_on_launch=False,
            )
            # A subnet in a secondary block can only be created once that block is attached.
            for block, cidr in zip(self.secondary_cidr_blocks, net.secondary_cidrs):
                if sn.cidr.subnet_of(cidr):
                    subnet.node.add_dependency(block)
            if net.nat_count:
                subnet.add_default_nat_route(self._nat_gateway_for(sn.availability_zone))
            cdk.Tags.of(subnet).add("Name", f"{self.stack_name}/hyperpod-{sn.availability_zone}")
            subnets.append(subnet)
        return subnets

    def _gateway_endpoint(self) -> None:
        # Checkpoints, lifecycle scripts and ECR layers are S3 traffic: keep it off the NAT.
        self.vpc.add_gateway_endpoint(
            "S3Endpoint",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnets=[*self.eks_subnets, *self.hyperpod_subnets])],
        )

    def _flow_logs(self) -> None:
        group = self.log_group("FlowLogGroup", self.logs_key, f"/{self.settings.prefix}/{self.settings.env_name}/vpc-flow-logs")
        flow_log = self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        compliance.acknowledge(
            flow_log,
            "The flow-log role's inline policy is CDK's grant of write access to this one log group only",
            "NIST.800.53.R5-IAMNoInlinePolicy",
        )

    # ------------------------------------------------------------------ teardown

    def _wait_for_interfaces_on_delete(self) -> None:
        """Deleted first (it refers to the subnets and the group), this waits before their
        deletion until no network interface holds them, whatever made it: Lambda frees the
        kubectl provider's and the accelerator gate's up to 20 minutes after the functions are
        gone, HyperPod the VPC CNI's and its own once it has terminated the nodes
        (infra/handlers/vpc_teardown.py)."""
        existing_vpc = self.settings.uses_existing_vpc
        if existing_vpc and self.settings.network.existing_security_group_id:
            return  # nothing here is deleted with this stack: no subnet, no security group to wait for
        subnets = [*self.eks_subnets, *self.hyperpod_subnets]
        if not existing_vpc:
            subnets += self.vpc.public_subnets
        wait = readiness.ChainedWait(
            self,
            # The id it had when it waited for Lambda's interfaces only: a new id would replace it, and
            # deleting the old one would wait, mid-update, for the interfaces of the running nodes.
            "LambdaInterfacesReleased",
            handler="vpc_teardown",
            resource_type="Custom::VpcTeardown",
            properties={
                "VpcId": self.vpc.vpc_id,
                # Referenced so that CloudFormation deletes them after this wait, not beside it.
                "SubnetIds": [subnet.subnet_id for subnet in subnets],
                "SecurityGroupId": self.efa_security_group.security_group_id,
                # Only a VPC this stack deletes: another's GuardDuty endpoint stays where it is.
                **({"RemoveGuardDuty": "true"} if not existing_vpc else {}),
                # In an existing VPC the subnets stay, and other interfaces in them are their owners':
                # only those holding the security group deleted here are waited for.
                **({"OnlyInterfacesOfTheGroup": "true"} if existing_vpc else {}),
            },
            total_minutes=timing.LINK_WAIT_S / 60,
            description="are this VPC's network interfaces released",
            why_these_functions="a wait on deletion for the network interfaces that hold this VPC to go; its handlers call "
            "only the EC2 API",
        )
        describe = ["ec2:DescribeNetworkInterfaces"]
        if not self.settings.uses_existing_vpc:
            describe += ["ec2:DescribeVpcEndpoints", "ec2:DescribeSecurityGroups"]
            # What GuardDuty's automated agent adds to the VPC, and nothing else: the same
            # tag condition GuardDuty's own service-linked role deletes under.
            arn = f"arn:{cdk.Aws.PARTITION}:ec2:{self.region}:{self.account}"
            wait.is_complete.add_to_role_policy(
                iam.PolicyStatement(
                    sid="GuardDutyLeftovers",
                    actions=["ec2:DeleteVpcEndpoints", "ec2:DeleteSecurityGroup"],
                    resources=[f"{arn}:vpc-endpoint/*", f"{arn}:security-group/*"],
                    conditions={"Null": {"aws:ResourceTag/GuardDutyManaged": "false"}},
                )
            )
        wait.is_complete.add_to_role_policy(iam.PolicyStatement(actions=describe, resources=["*"]))
        compliance.acknowledge(
            wait.is_complete,
            "ec2:Describe* support no resource-level permissions (Service Authorization Reference); the deletes are "
            "limited to endpoints and security groups tagged GuardDutyManaged, as GuardDuty's own role is",
            "AwsSolutions-IAM5[Resource::*]",
            *(
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{self.region}:{self.account}:{kind}/*]"
                for kind in ("vpc-endpoint", "security-group")
            ),
        )

    # ------------------------------------------------------------------ existing VPC

    def _import_vpc(self) -> ec2.IVpc:
        ev = self.settings.network.existing_vpc
        return ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=ev.vpc_id,
            vpc_cidr_block=str(ev.vpc_cidr),
            availability_zones=list(self.settings.availability_zones),
            private_subnet_ids=list(ev.private_subnet_ids),
            private_subnet_route_table_ids=list(ev.private_subnet_route_table_ids),
        )

    def _import_hyperpod_subnets(self) -> list[ec2.ISubnet]:
        return [
            ec2.Subnet.from_subnet_attributes(
                self,
                f"HyperPodSubnet-{sn.availability_zone}",
                subnet_id=sn.subnet_id,
                availability_zone=sn.availability_zone,
                route_table_id=sn.route_table_id,
            )
            for sn in self.settings.network.hyperpod_subnets
        ]

    # ------------------------------------------------------------------ security

    def _efa_security_group(self) -> ec2.ISecurityGroup:
        existing = self.settings.network.existing_security_group_id
        if existing:
            # Its rules stay its owner's (a rule that is already there fails to be added again);
            # preflight checks it has the ones below.
            return ec2.SecurityGroup.from_security_group_id(self, "EfaSecurityGroup", existing, mutable=False)
        sg = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="HyperPod nodes and EKS control plane; EFA needs all traffic to and from itself",
        )
        # EFA's OS-bypass traffic is only allowed by rules that name the group itself,
        # in both directions; a 0.0.0.0/0 egress rule does not cover it.
        sg.add_ingress_rule(sg, ec2.Port.all_traffic(), "EFA and node-to-node traffic within the group")
        sg.add_egress_rule(sg, ec2.Port.all_traffic(), "EFA and node-to-node traffic within the group")
        compliance.acknowledge(
            sg,
            "The only ingress rule's source is this security group itself (EFA requires it); nothing outside can reach it",
            "NIST.800.53.R5-EC2RestrictedCommonPorts",
        )
        # As both references: all egress. Nodes reach ECR, S3, STS, SageMaker, EKS, EKS Auth,
        # Hugging Face and FSx on several ports (443, 988, 1018-1023, DNS over the VPC resolver).
        # CDK refuses an all-traffic 0.0.0.0/0 rule next to others (it wants allow_all_outbound,
        # which then drops the self rule EFA needs), so this one is the L1, as in the references.
        ec2.CfnSecurityGroupEgress(
            self,
            "EfaSecurityGroupInternetEgress",
            group_id=sg.security_group_id,
            ip_protocol="-1",
            cidr_ip="0.0.0.0/0",
            description="AWS APIs, image registries and datasets via NAT or endpoints",
        )
        return sg

    def _interface_endpoints(self) -> None:
        cidrs = [str(block) for block in self.settings.network.cidr_blocks]
        endpoint_sg = ec2.SecurityGroup(
            self, "EndpointSecurityGroup", vpc=self.vpc, allow_all_outbound=False, description="Interface endpoints: HTTPS from the VPC"
        )
        for cidr in cidrs:
            endpoint_sg.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from inside the VPC")
        # HyperPod nodes call the SageMaker API and EKS Auth (Pod Identity); with these they
        # need no NAT for either. "all" adds everything else they and the kubectl Lambda call.
        for service in self.settings.network.endpoint_services:
            self.vpc.add_interface_endpoint(
                f"Endpoint-{service}",
                service=ec2.InterfaceVpcEndpointService(f"com.amazonaws.{self.region}.{service}", 443),
                private_dns_enabled=True,
                # Our group already admits HTTPS from every VPC block; CDK's `open` rule
                # would add a token CIDR the scanners cannot evaluate.
                open=False,
                security_groups=[endpoint_sg],
                subnets=ec2.SubnetSelection(subnets=self.eks_subnets),
            )

