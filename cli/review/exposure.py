"""Risk and exposure in an assembly: what holds data and what happens to it on delete,
what the internet can reach, and the service quotas a deploy needs.
"""

from __future__ import annotations

import ipaddress
from collections import Counter

from cli.review.assembly import StackSummary, group_instance_type, of_type, path_of
from infra import naming

# Types whose loss loses data or a running cluster.
STATEFUL_TYPES = (
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
    "AWS::EKS::Cluster",
    "AWS::SageMaker::Cluster",
    "AWS::APS::Workspace",
    "AWS::Grafana::Workspace",
    "AWS::FSx::FileSystem",
    "AWS::ECR::Repository",
)


def quota_name(instance_type: str) -> str:
    """The SageMaker service quota that caps HyperPod instances of one type (Service Quotas' name)."""
    return f"{instance_type} for cluster usage"


def stateful(stacks: list[StackSummary]) -> list[dict]:
    emptied = {
        ref.get("Ref")
        for stack in stacks
        for res in stack.resources.values()
        if res["Type"] == "Custom::S3AutoDeleteObjects"
        for ref in [res.get("Properties", {}).get("BucketName", {})]
        if isinstance(ref, dict)
    }
    return [
        {
            "stack": stack.name,
            "id": lid,
            "resource": path_of(res, lid),
            "type": res["Type"],
            "deletion_policy": res.get("DeletionPolicy", "Delete"),
            "update_replace_policy": res.get("UpdateReplacePolicy", "Delete"),
            "emptied_on_delete": lid in emptied,
            "termination_protection": stack.termination_protection,
        }
        for stack, lid, res in of_type(stacks, *STATEFUL_TYPES)
    ]


def public_endpoints(stacks: list[StackSummary]) -> list[dict]:
    rows = []
    for stack, lid, res in of_type(stacks, "AWS::EKS::Cluster"):
        vpc = res["Properties"].get("ResourcesVpcConfig", {})
        if vpc.get("EndpointPublicAccess", True):
            # EKS's default for a public endpoint without a list is 0.0.0.0/0.
            rows.append({"stack": stack.name, "id": lid, "resource": path_of(res, lid),
                         "cidrs": vpc.get("PublicAccessCidrs", ["0.0.0.0/0"])})
    return rows


def _vpc_cidrs(stacks: list[StackSummary]) -> list[ipaddress.IPv4Network]:
    blocks = [
        res["Properties"].get("CidrBlock") for _, _, res in of_type(stacks, "AWS::EC2::VPC", "AWS::EC2::VPCCidrBlock")
    ]
    for stack in stacks:
        listed = stack.template.get("Outputs", {}).get(naming.VPC_CIDR_BLOCKS_OUTPUT, {}).get("Value")
        blocks += listed.split(",") if isinstance(listed, str) else []
    return [ipaddress.ip_network(block) for block in blocks if isinstance(block, str)]


def open_ingress(stacks: list[StackSummary]) -> list[dict]:
    """Ingress rules admitting an address range outside the VPC's own CIDR blocks."""
    inside = _vpc_cidrs(stacks)
    rules = []
    for stack, lid, res in of_type(stacks, "AWS::EC2::SecurityGroupIngress"):
        rules.append((stack, lid, path_of(res, lid), res["Properties"]))
    for stack, lid, res in of_type(stacks, "AWS::EC2::SecurityGroup"):
        rules += [(stack, lid, path_of(res, lid), rule) for rule in res["Properties"].get("SecurityGroupIngress", [])]
    rows = []
    for stack, lid, path, rule in rules:
        cidr = rule.get("CidrIp") or rule.get("CidrIpv6")
        if not isinstance(cidr, str):
            continue  # a security group or prefix list, or the VPC's CIDR by reference
        net = ipaddress.ip_network(cidr, strict=False)
        if any(net.version == v.version and net.subnet_of(v) for v in inside):
            continue
        ports = "all" if str(rule.get("IpProtocol")) == "-1" else f"{rule.get('IpProtocol')} {rule.get('FromPort')}-{rule.get('ToPort')}"
        rows.append({"stack": stack.name, "id": lid, "resource": path, "cidr": cidr, "ports": ports})
    return rows


def quotas(stacks: list[StackSummary]) -> list[dict]:
    """The SageMaker "<type> for cluster usage" quotas the deploy needs: the nodes at deploy, and
    for a type Karpenter scales from 0 the most its NodePools admit (cli.cost.autoscaled_ceilings),
    which the quota must cover before Karpenter can get there."""
    from cli.review.cost import autoscaled_ceilings

    needed: Counter = Counter()
    autoscaled: dict[str, int | None] = {}
    ceilings = autoscaled_ceilings(stacks)
    for _, _, res in of_type(stacks, "AWS::SageMaker::Cluster"):
        karpenter = res["Properties"].get("AutoScaling", {}).get("Mode") == "Enable"
        for group in res["Properties"].get("InstanceGroups", []):
            count = group.get("InstanceCount", 0)
            itype = group_instance_type(group)
            needed[itype] += count if isinstance(count, int) else 0
            if karpenter and count == 0:
                most = ceilings.get(group["InstanceGroupName"])
                autoscaled[itype] = None if most is None or autoscaled.get(itype, 0) is None else autoscaled.get(itype, 0) + most
    rows = [{"quota": quota_name(t), "needed": n, "line": f"{n} x {quota_name(t)}"} for t, n in sorted(needed.items()) if n]
    # Karpenter's groups start at 0: the quota must cover the most their NodePool admits.
    rows += [
        {"quota": quota_name(t), "needed": None, "most": most,
         "line": f"{quota_name(t)}: autoscaled from 0 by Karpenter; " + (
             f"cover the most its NodePool admits, {most} node(s)" if most is not None else "cover the group's max_count")}
        for t, most in sorted(autoscaled.items())
    ]
    return rows


def report(stacks: list[StackSummary]) -> dict:
    return {
        "stateful": stateful(stacks),
        "public_endpoints": public_endpoints(stacks),
        "open_ingress": open_ingress(stacks),
        "quotas": quotas(stacks),
    }


def markdown(risk: dict, new_quotas: list[str] = ()) -> list[str]:
    """new_quotas: quota names the baseline did not need, marked for a check."""
    out = ["## Risk and exposure", "", "What holds data, and what a stack delete does to it:", ""]
    out += ["| resource | type | on delete | on replace | stack protected |", "|---|---|---|---|---|"]
    # The log groups of aws-cdk-lib's own Lambdas (providers, handlers): one row per stack, not one each.
    lambda_logs = [r for r in risk["stateful"] if r["type"] == "AWS::Logs::LogGroup" and r["resource"].endswith("/LogGroup/Resource")]
    by_stack: dict[str, list[dict]] = {}
    for r in lambda_logs:
        by_stack.setdefault(r["stack"], []).append(r)
    for r in [r for r in risk["stateful"] if r not in lambda_logs] + [group[0] | {"count": len(group)} for group in by_stack.values()]:
        if "count" in r:
            r = r | {"resource": f"{r['stack']}: {r['count']} log groups of CDK-built Lambdas"}
        on_delete = r["deletion_policy"].lower() + (" (emptied first)" if r["emptied_on_delete"] else "")
        out.append(
            f"| `{r['resource']}` | {r['type'].split('::', 1)[1]} | {on_delete} | {r['update_replace_policy'].lower()} | "
            f"{'yes' if r['termination_protection'] else 'no'} |"
        )
    out += [""]
    if risk["public_endpoints"]:
        for e in risk["public_endpoints"]:
            out.append(f"- **Public Kubernetes API endpoint** `{e['resource']}` admits {', '.join(e['cidrs'])}.")
    else:
        out.append("- The Kubernetes API endpoint is private.")
    for rule in risk["open_ingress"]:
        out.append(f"- **Security group rule** `{rule['resource']}` admits {rule['cidr']} (outside the VPC) on {rule['ports']}.")
    if not risk["open_ingress"]:
        out.append("- No security-group rule admits an address outside the VPC.")
    out += ["", "Service quotas the deploy needs (Service Quotas > Amazon SageMaker; `hyperpod-cdk preflight` checks them):", ""]
    out += [f"- {q['line']}" + (" (new: check your quota)" if q["quota"] in new_quotas else "") for q in risk["quotas"]]
    return out
