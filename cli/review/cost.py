"""What the environment costs to keep standing, per hour and per month, from the
resources in the assembly and the dated table in cli/review/prices.py.

The instance groups dominate and are counted at their configured size. Usage-based
charges (data through NAT, samples into Prometheus, storage) are shown with the
assumption they rest on, never hidden inside a total.
"""

from __future__ import annotations

from cli.review import prices
from cli.review.assembly import StackSummary, group_instance_type, manifest_objects, of_type
from infra import catalogue, versions

# An assumption, named: active series a node sends to Prometheus (node exporter, DCGM,
# kubelet and the HyperPod collectors), each scraped every 30 s.
SERIES_PER_NODE = 2000
SCRAPE_SECONDS = 30
# Editors and administrators assumed active in Grafana.
GRAFANA_EDITORS = 1


_RATE_NOTES = {
    "sagemaker": f"SageMaker list rate, on-demand ({prices.SAGEMAKER_AS_OF})",
    "floor": "a floor: EC2 On-Demand rate of the same hardware (no SageMaker rate in the table); the HyperPod rate is at or above it",
    "unpriced": f"no price in the table, neither SageMaker's nor EC2's, nor a stated floor ({prices.UNPRICED_WHY}): no total",
}


def _line(item: str, count: float, hourly: float | None, note: str = "", monthly_fixed: float | None = None, *,
          floor: bool = False, hourly_max: float | None = None, max_count: int | None = None) -> dict:
    if monthly_fixed is not None:
        hourly = monthly_fixed / prices.HOURS_PER_MONTH
    line = {
        "item": item,
        "count": count,
        "hourly": None if hourly is None else round(hourly, 4),
        "monthly": None if hourly is None else round(hourly * prices.HOURS_PER_MONTH, 2),
        "note": note,
        "floor": floor,
    }
    if max_count is not None:  # an autoscaled group: from its count now to its most
        line |= {"max_count": max_count, "hourly_max": None if hourly_max is None else round(hourly_max, 4)}
    return line


def _literal_count(value) -> int:
    return value if isinstance(value, int) else 1


def autoscaled_ceilings(stacks: list[StackSummary]) -> dict[str, int | None]:
    """instance group -> the most nodes Karpenter may give it (None: not known), for the
    groups a HyperpodNodeClass names: its NodePool's limit of the resource the group's nodes
    bring (accelerators, else vCPUs) over what one node brings, as manifests.autoscaling sets it."""
    objects = [obj for _, _, obj in manifest_objects(stacks)]
    limits: dict[str, dict] = {}
    for pool in (o for o in objects if o.get("kind") == "NodePool"):
        ref = pool.get("spec", {}).get("template", {}).get("spec", {}).get("nodeClassRef", {}).get("name")
        limits[ref] = pool.get("spec", {}).get("limits", {}) or {}
    types = {g["InstanceGroupName"]: group_instance_type(g) for _, _, res in of_type(stacks, "AWS::SageMaker::Cluster")
             for g in res.get("Properties", {}).get("InstanceGroups", [])}
    out: dict[str, int | None] = {}
    for node_class in (o for o in objects if o.get("kind") == "HyperpodNodeClass"):
        pool = limits.get(node_class.get("metadata", {}).get("name"), {})
        for group in node_class.get("spec", {}).get("instanceGroups", []):
            out[group] = _ceiling(catalogue.lookup(types.get(group, "")), pool)
    return out


def _ceiling(kind, limits: dict) -> int | None:
    """How many nodes of `kind` a NodePool's limits admit; None where a figure is missing."""
    if kind is None:
        return None
    resource, per_node = (kind.accelerator_resource, kind.accelerators) if kind.is_accelerated else ("cpu", kind.vcpus)
    try:
        return int(limits[resource]) // per_node if per_node else None
    except (KeyError, TypeError, ValueError):
        return None


def estimate(stacks: list[StackSummary], region: str) -> dict:
    lines = []
    nodes = 0
    kinds: dict[str, str] = {}  # instance type -> which rate priced it
    ceilings = autoscaled_ceilings(stacks)
    for _, _, res in of_type(stacks, "AWS::SageMaker::Cluster"):
        for group in res["Properties"].get("InstanceGroups", []):
            itype, name = group_instance_type(group), group["InstanceGroupName"]
            count = _literal_count(group.get("InstanceCount", 0))
            nodes += count
            rate, kind = prices.instance_rate(itype)
            kinds[itype] = kind
            hourly = None if rate is None else rate * count
            note = f"a stated floor, {prices.floor_note(itype)}" if prices.floor_note(itype) else _RATE_NOTES[kind]
            if name in ceilings:
                most = ceilings[name]
                shown = f"{count} to {most if most is not None else '?'} x {itype} ({name}, autoscaled by Karpenter)"
                lines.append(_line(shown, count, hourly, note, floor=kind == "floor", max_count=most,
                                   hourly_max=None if rate is None or most is None else rate * most))
            else:
                lines.append(_line(f"{count} x {itype} ({name})", count, hourly, note, floor=kind == "floor"))
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
    unpriced_types = sorted(t for t, k in kinds.items() if k == "unpriced")
    # An instance type without a price is never $0: the estimate has no total then, and says why.
    no_total = (f"no price in the table for {', '.join(unpriced_types)} (neither SageMaker's rate, EC2's floor nor a stated "
                "floor); a total without it would be wrong") if unpriced_types else None
    priced = [line for line in lines if line["hourly"] is not None]
    hourly = None if no_total else round(sum(line["hourly"] for line in priced), 2)
    autoscaled = [line for line in lines if "max_count" in line]
    hourly_max = None
    if autoscaled and hourly is not None and all(line["hourly_max"] is not None for line in autoscaled):
        hourly_max = round(hourly + sum(line["hourly_max"] - line["hourly"] for line in autoscaled), 2)
    return {
        "region": region,
        "table_region": prices.REGION,
        "as_of": prices.AS_OF,
        "lines": lines,
        "hourly": hourly,
        "monthly": None if hourly is None else round(sum(line["monthly"] for line in priced), 2),
        "hourly_max": hourly_max,
        "monthly_max": None if hourly_max is None else round(hourly_max * prices.HOURS_PER_MONTH, 2),
        "autoscaled": bool(autoscaled),
        "no_total": no_total,
        "unpriced": [line["item"] for line in lines if line["hourly"] is None],
        # What is priced, where there is no total: the part a change is known to move.
        "known_hourly": round(sum(line["hourly"] for line in priced), 2),
        "unpriced_types": unpriced_types,
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
    ec2 = [t for t in floor if not prices.floor_note(t)]
    stated = [t for t in floor if prices.floor_note(t)]
    where = " and ".join(
        ([f"the EC2 floor for {', '.join(ec2)}"] if ec2 else []) + ([f"a stated floor for {', '.join(stated)}"] if stated else [])
    ) + " (no SageMaker rate in the table; the bill is higher)"
    return f"{listed_rates}, except {where}" if listed else where


def delta(before: dict, after: dict) -> dict:
    """The change in the estimate between a baseline's and this change's."""
    if before["hourly"] is None or after["hourly"] is None:
        return {"hourly": None, "monthly": None, "line": _partial(before, after)}
    hourly, monthly = round(after["hourly"] - before["hourly"], 2), round(after["monthly"] - before["monthly"], 2)
    line = (
        f"Cost: {_signed(hourly, 2)} an hour, {_signed(monthly, 0)} a month "
        f"(${before['hourly']:,.2f} -> ${after['hourly']:,.2f} an hour, ${before['monthly']:,.0f} -> ${after['monthly']:,.0f} a month)"
        if hourly or monthly
        else f"Cost: unchanged (${after['hourly']:,.2f} an hour)"
    )
    if before.get("hourly_max") or after.get("hourly_max"):
        most = lambda e: f"${e['hourly_max']:,.2f}" if e.get("hourly_max") is not None else (  # noqa: E731
            "not known" if e.get("autoscaled") else f"${e['hourly']:,.2f}")
        line += f"; with the autoscaled groups at their most {most(before)} -> {most(after)} an hour"
    floors = sorted(set(before.get("floor_types", [])) | set(after.get("floor_types", [])))
    if floors and (hourly or monthly):
        line += f" ({', '.join(floors)} priced at a floor, at or below the HyperPod rate: the bill moves more)"
    return {"hourly": hourly, "monthly": monthly, "line": line}


def _partial(before: dict, after: dict) -> str:
    """Where a side has no total: the direction, where the known part settles it, and the known part."""
    known_before, known_after = before.get("known_hourly", 0.0), after.get("known_hourly", 0.0)
    missing_before, missing_after = before.get("unpriced", []), after.get("unpriced", [])
    known = f"the priced part ${known_before:,.2f} -> ${known_after:,.2f} an hour"
    unpriced = f"not priced: {', '.join(missing_after or missing_before)}" if not (missing_before and missing_after) else (
        f"not priced: {', '.join(missing_before)} -> {', '.join(missing_after)}")
    if missing_before == missing_after:  # the same unpriced lines on both sides: the change is the priced part's
        moved = round(known_after - known_before, 2)
        return f"Cost: {_signed(moved, 2)} an hour ({known}; {unpriced} on both sides, unchanged)"
    if after["hourly"] is None and before["hourly"] is not None and known_after > before["hourly"]:
        return f"Cost: up by at least {_signed(known_after - before['hourly'], 2)} an hour ({known}; {unpriced}, which adds more)"
    if before["hourly"] is None and after["hourly"] is not None and known_before > after["hourly"]:
        return f"Cost: down by at least {_signed(after['hourly'] - known_before, 2)} an hour ({known}; {unpriced}, which was more)"
    return f"Cost: direction not known ({known}; {unpriced}: {prices.UNPRICED_WHY})"


def _signed(amount: float, digits: int) -> str:
    return f"{'+' if amount >= 0 else '-'}${abs(amount):,.{digits}f}"


def _beside(change: dict | None) -> str:
    if not change or not (change["hourly"] or change["monthly"]):
        return ""
    return f" ({_signed(change['hourly'], 2)} an hour, {_signed(change['monthly'], 0)} a month against the baseline)"


def _money(line: dict, monthly: bool) -> str:
    """A line's amount: a floor says "at least", an autoscaled group its range."""
    if line["hourly"] is None:
        return "unpriced"
    per, digits = (prices.HOURS_PER_MONTH, 0) if monthly else (1, 2)
    amount = f"${line['hourly'] * per:,.{digits}f}"
    if "max_count" in line:
        amount += " to ?" if line["hourly_max"] is None else f" to ${line['hourly_max'] * per:,.{digits}f}"
    return f"at least {amount}" if line["floor"] else amount


def markdown(cost: dict, change: dict | None = None) -> list[str]:
    where = (
        f"prices of {cost['table_region']}, as of {cost['as_of']}"
        if cost["region"] == cost["table_region"]
        else f"prices of {cost['table_region']} as of {cost['as_of']}; {cost['region']} may differ"
    )
    if cost["hourly"] is None:
        total = f"**no total**: {cost['no_total']}"
    else:
        floor = "at least " if cost["floor_types"] else ""
        total = f"{floor}**${cost['hourly']:,.2f} an hour, ${cost['monthly']:,.0f} a month**{_beside(change)}"
        if cost.get("hourly_max") is not None:
            total += f", up to ${cost['hourly_max']:,.2f} an hour (${cost['monthly_max']:,.0f} a month) with the autoscaled groups at their most"
        elif cost.get("autoscaled"):
            total += " (the autoscaled groups' most is not known)"
        total = total if floor else "about " + total  # a floor is already a bound: not "about at least"
    out = [
        "## Estimated cost",
        "",
        f"An estimate from the dated table in cli/review/prices.py ({where}), instances at {cost['rates']}: {total} while everything "
        "stands, before data transfer and storage.",
        "",
        "| item | per hour | per month | note |",
        "|---|---:|---:|---|",
    ]
    for line in cost["lines"]:
        out.append(f"| {line['item']} | {_money(line, False)} | {_money(line, True)} | {line['note']} |")
    if cost["unpriced"]:
        out += ["", f"Not in the total (no price in the table): {', '.join(cost['unpriced'])}."]
    return out
