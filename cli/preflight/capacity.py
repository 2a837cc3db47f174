"""Reserved capacity the config depends on: each instance group's training plan (DescribeTrainingPlan:
its status, the instance type and the zone its capacity is in), and the account's SageMaker Capacity
Reservations, which apply to every HyperPod cluster of the account (ListCapacityReservations).

A plan states its zone as an ID (`ReservedCapacitySummaries[].AvailabilityZoneId`), while config names
zones, and names map to IDs differently in each account: EC2's DescribeAvailabilityZones maps them."""

from __future__ import annotations

from cli.preflight.base import Clients, Result, error_code
from infra.config import Settings

# DescribeTrainingPlan's TrainingPlanStatus (botocore's sagemaker model): a group draws on a plan only
# while it is one of these.
USABLE_PLAN = ("Active", "Scheduled")


def _zone_ids(aws: Clients) -> dict[str, str]:
    """Zone name -> zone ID in this account (DescribeAvailabilityZones), asked once."""
    key = ("zone ids",)
    if key not in aws.cache:
        found = aws("ec2").describe_availability_zones()["AvailabilityZones"]
        aws.cache[key] = {z["ZoneName"]: z["ZoneId"] for z in found}
    return aws.cache[key]


def group_zone(settings: Settings, group) -> str:
    """The zone a group's nodes run in: its own subnet's, else the default HyperPod subnet's (stacks/hyperpod.py)."""
    return group.availability_zone or settings.network.hyperpod_subnets[0].availability_zone


def check_training_plans(settings: Settings, aws: Clients) -> list[Result]:
    results = []
    for i, group in enumerate(settings.hyperpod.instance_groups):
        if not group.training_plan_arn:
            continue
        check, field = f"training plan of {group.name}", f"hyperpod.instance_groups[{i}].training_plan_arn"
        name = group.training_plan_arn.partition(":training-plan/")[2]
        try:
            plan = aws("sagemaker").describe_training_plan(TrainingPlanName=name)
        except Exception as err:  # noqa: BLE001 - boto3 error classes are per client
            if error_code(err) not in ("ResourceNotFound", "ValidationException"):
                raise
            results.append(Result(check, "fail", f"no training plan {name} in {aws.region}", f"create it, or fix {field}"))
            continue
        if plan.get("Status") not in USABLE_PLAN:
            results.append(Result(check, "fail", f"{name} is {plan.get('Status')}: its capacity is not there to draw on",
                                  f"use an Active or Scheduled plan in {field}"))
            continue
        capacity = [c for c in plan.get("ReservedCapacitySummaries", []) if c.get("Status") in USABLE_PLAN]
        of_type = [c for c in capacity if c.get("InstanceType") == group.instance_type]
        if capacity and not of_type:
            types = sorted({c.get("InstanceType", "?") for c in capacity})
            results.append(Result(check, "fail", f"{name} reserves {', '.join(types)}, not {group.instance_type}",
                                  f"a plan for {group.instance_type}, or the group on the plan's type"))
            continue
        zone = group_zone(settings, group)
        zone_id = _zone_ids(aws).get(zone)
        plan_zones = sorted({c["AvailabilityZoneId"] for c in of_type if c.get("AvailabilityZoneId")})
        if plan_zones and zone_id not in plan_zones:
            results.append(Result(
                check, "fail",
                f"{name}'s capacity is in zone ID {', '.join(plan_zones)}; the group runs in {zone}, which is {zone_id or 'no zone'} "
                "in this account (zone names map to IDs per account: DescribeAvailabilityZones)",
                f"put the group in the zone whose ID is {plan_zones[0]} (hyperpod.instance_groups[{i}].availability_zone, with a "
                "HyperPod subnet there)"))
            continue
        reserved = sum(c.get("TotalInstanceCount", 0) for c in of_type)
        if of_type and reserved < group.count:
            results.append(Result(check, "warn", f"{name} reserves {reserved} {group.instance_type}, the group asks for {group.count}",
                                  "the rest come from on-demand capacity, or wait"))
            continue
        where = f" in {zone} ({zone_id})" if plan_zones else ""
        results.append(Result(check, "pass", f"{name} is {plan['Status']}: {reserved} {group.instance_type}{where}"))
    return results


def check_capacity_reservations(settings: Settings, aws: Clients) -> list[Result]:
    """The account's SageMaker Capacity Reservations of the types config uses: every HyperPod cluster of the
    account draws on them, so another cluster may hold what this one counts on, and this one what others do."""
    types = set(settings.capacity())
    found, token = [], None
    while True:
        page = aws("sagemaker").list_capacity_reservations(**({"NextToken": token} if token else {}))
        found += page.get("CapacityReservationSummaries", [])
        token = page.get("NextToken")
        if not token:
            break
    live = [r for r in found if r.get("Status") in ("Active", "Scheduled") and r.get("InstanceType") in types]
    if not live:
        return [Result("capacity reservations", "pass", f"no SageMaker Capacity Reservation of {', '.join(sorted(types))} in "
                       f"{aws.region}: on-demand capacity, or a group's training plan")]
    ids = _zone_ids(aws)
    names = {v: k for k, v in ids.items()}
    results = []
    for r in live:
        zone = r.get("AvailabilityZoneId")
        results.append(Result(
            f"capacity reservation {r.get('SMCapacityReservationId', '?')}", "pass",
            f"{r.get('Status')}: {r.get('TotalInstanceCount', '?')} {r['InstanceType']} in {names.get(zone, zone)} ({zone}), "
            f"until {r.get('EndTime', '?')}: it applies to every HyperPod cluster of the account, this one among them"))
    return results
