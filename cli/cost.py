"""What the environment costs to keep standing, per hour and per month, from the
resources in the assembly and the dated table in cli/prices.py.

The instance groups dominate and are counted at their configured size. Usage-based
charges (data through NAT, samples into Prometheus, storage) are shown with the
assumption they rest on, never hidden inside a total.
"""

from __future__ import annotations

from cli import prices
from cli.assembly import StackSummary, group_instance_type, of_type
from infra import versions

# An assumption, named: active series a node sends to Prometheus (node exporter, DCGM,
# kubelet and the HyperPod collectors), each scraped every 30 s.
SERIES_PER_NODE = 2000
SCRAPE_SECONDS = 30
# Editors and administrators assumed active in Grafana.
GRAFANA_EDITORS = 1


_RATE_NOTES = {
    "sagemaker": f"SageMaker list rate, on-demand ({prices.SAGEMAKER_AS_OF})",
    "floor": "EC2 On-Demand floor: no SageMaker rate in the table; the HyperPod rate is at or above it",
    "unpriced": "no price in the table",
}


def _line(item: str, count: float, hourly: float | None, note: str = "", monthly_fixed: float | None = None) -> dict:
    if monthly_fixed is not None:
        hourly = monthly_fixed / prices.HOURS_PER_MONTH
    return {
        "item": item,
        "count": count,
        "hourly": None if hourly is None else round(hourly, 4),
        "monthly": None if hourly is None else round(hourly * prices.HOURS_PER_MONTH, 2),
        "note": note,
    }


def _literal_count(value) -> int:
    return value if isinstance(value, int) else 1


def estimate(stacks: list[StackSummary], region: str) -> dict:
    lines = []
    nodes = 0
    kinds: dict[str, str] = {}  # instance type -> which rate priced it
    for _, _, res in of_type(stacks, "AWS::SageMaker::Cluster"):
        for group in res["Properties"].get("InstanceGroups", []):
            itype = group_instance_type(group)
            count = _literal_count(group.get("InstanceCount", 0))
            nodes += count
            rate, kind = prices.instance_rate(itype)
            kinds[itype] = kind
            lines.append(_line(f"{count} x {itype} ({group['InstanceGroupName']})", count, None if rate is None else rate * count, _RATE_NOTES[kind]))
    for _, _, res in of_type(stacks, "AWS::EKS::Cluster"):
        version = res["Properties"].get("Version", versions.DEFAULT_EKS_VERSION)
        extended = versions.parse(version) < versions.OLDEST_STANDARD_SUPPORT
        rate = prices.EKS_EXTENDED if extended else prices.EKS_STANDARD
        support = "extended support" if extended else "standard support"
        lines.append(_line(f"EKS control plane {version} ({support})", 1, rate, versions.EKS_SUPPORT_SOURCE))
    nat = sum(1 for _ in of_type(stacks, "AWS::EC2::NatGateway"))
    if nat:
        lines.append(_line(f"{nat} NAT gateway(s)", nat, nat * prices.NAT_GATEWAY_HOUR, "plus $0.045 per GB processed"))
    endpoint_azs = sum(
        len(res["Properties"].get("SubnetIds", []))
        for _, _, res in of_type(stacks, "AWS::EC2::VPCEndpoint")
        if res["Properties"].get("VpcEndpointType") == "Interface"
    )
    if endpoint_azs:
        lines.append(_line(f"interface endpoints ({endpoint_azs} endpoint-AZs)", endpoint_azs, endpoint_azs * prices.INTERFACE_ENDPOINT_AZ_HOUR, "plus $0.01 per GB"))
    keys = sum(1 for _ in of_type(stacks, "AWS::KMS::Key"))
    if keys:
        lines.append(_line(f"{keys} KMS key(s)", keys, None, "per key-month", monthly_fixed=keys * prices.KMS_KEY_MONTH))
    if any(True for _ in of_type(stacks, "AWS::APS::Workspace")):
        samples = nodes * SERIES_PER_NODE * prices.HOURS_PER_MONTH * 3600 / SCRAPE_SECONDS
        monthly = samples / 10_000_000 * prices.PROMETHEUS_PER_10M_SAMPLES
        note = f"usage-based: assumes {SERIES_PER_NODE} series per node every {SCRAPE_SECONDS} s ({samples / 1e6:,.0f}M samples a month)"
        lines.append(_line("Managed Prometheus ingestion", nodes, None, note, monthly_fixed=monthly))
    if any(True for _ in of_type(stacks, "AWS::Grafana::Workspace")):
        lines.append(_line("Managed Grafana", GRAFANA_EDITORS, None, f"per active editor; assumes {GRAFANA_EDITORS}", monthly_fixed=GRAFANA_EDITORS * prices.GRAFANA_EDITOR_MONTH))
    for _, _, res in of_type(stacks, "AWS::FSx::FileSystem"):
        lustre = res["Properties"].get("LustreConfiguration", {})
        size, tier = res["Properties"].get("StorageCapacity"), lustre.get("PerUnitStorageThroughput")
        lines.append(_line(f"FSx for Lustre {size} GiB {lustre.get('DeploymentType')} at {tier} MB/s/TiB", 1, None, "no price in the table"))
    priced = [line for line in lines if line["hourly"] is not None]
    return {
        "region": region,
        "table_region": prices.REGION,
        "as_of": prices.AS_OF,
        "lines": lines,
        "hourly": round(sum(line["hourly"] for line in priced), 2),
        "monthly": round(sum(line["monthly"] for line in priced), 2),
        "unpriced": [line["item"] for line in lines if line["hourly"] is None],
        "floor_types": sorted(t for t, k in kinds.items() if k == "floor"),
        "rates": rates_used(kinds),
    }


def rates_used(kinds: dict[str, str]) -> str:
    """What the instance lines were priced at, in words, for the headline."""
    floor = sorted(t for t, k in kinds.items() if k == "floor")
    listed = any(k == "sagemaker" for k in kinds.values())
    listed_rates = f"SageMaker list rates ({prices.SAGEMAKER_AS_OF})"
    if not floor:
        return listed_rates
    where = f"the EC2 floor for {', '.join(floor)} (no SageMaker rate in the table; the bill is higher)"
    return f"{listed_rates}, except {where}" if listed else where


def delta(before: dict, after: dict) -> dict:
    """The change in the estimate between a baseline's and this change's."""
    hourly, monthly = round(after["hourly"] - before["hourly"], 2), round(after["monthly"] - before["monthly"], 2)
    line = (
        f"Cost: {_signed(hourly, 2)} an hour, {_signed(monthly, 0)} a month "
        f"(${before['hourly']:,.2f} -> ${after['hourly']:,.2f} an hour, ${before['monthly']:,.0f} -> ${after['monthly']:,.0f} a month)"
        if hourly or monthly
        else f"Cost: unchanged (${after['hourly']:,.2f} an hour)"
    )
    return {"hourly": hourly, "monthly": monthly, "line": line}


def _signed(amount: float, digits: int) -> str:
    return f"{'+' if amount >= 0 else '-'}${abs(amount):,.{digits}f}"


def _beside(change: dict | None) -> str:
    if not change or not (change["hourly"] or change["monthly"]):
        return ""
    return f" ({_signed(change['hourly'], 2)} an hour, {_signed(change['monthly'], 0)} a month against the baseline)"


def markdown(cost: dict, change: dict | None = None) -> list[str]:
    where = (
        f"prices of {cost['table_region']}, as of {cost['as_of']}"
        if cost["region"] == cost["table_region"]
        else f"prices of {cost['table_region']} as of {cost['as_of']}; {cost['region']} may differ"
    )
    out = [
        "## Estimated cost",
        "",
        f"An estimate from the dated table in cli/prices.py ({where}), instances at {cost['rates']}: about "
        f"**${cost['hourly']:,.2f} an hour, ${cost['monthly']:,.0f} a month**{_beside(change)} while everything stands, "
        "before data transfer and storage.",
        "",
        "| item | per hour | per month | note |",
        "|---|---:|---:|---|",
    ]
    for line in cost["lines"]:
        hourly = "unpriced" if line["hourly"] is None else f"${line['hourly']:,.2f}"
        monthly = "unpriced" if line["monthly"] is None else f"${line['monthly']:,.0f}"
        out.append(f"| {line['item']} | {hourly} | {monthly} | {line['note']} |")
    if cost["unpriced"]:
        out += ["", f"Not in the total (no price in the table): {', '.join(cost['unpriced'])}."]
    return out
