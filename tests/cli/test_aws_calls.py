"""Every AWS call the operator tools and handlers make is an operation of the installed botocore's model
of its service, and the members the checks read are in its shapes: a botocore that drops or renames one
fails here, not in an operator's preflight. pyproject.toml's boto3 floor is the oldest release whose
botocore models all of them (its comment says how that was read)."""

from __future__ import annotations

import re
from pathlib import Path

import botocore.session
from botocore import xform_name

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"can_paginate", "get_paginator", "get_waiter", "close"}
# Calls made on a client handed in from elsewhere (upgrade_plan's AccountVersions takes an EKS client).
HANDED_IN = {("eks", "ListInsights")}
# What the checks read beside the operations: (service, shape, member or enum value).
READ = [
    ("sagemaker", "ReservedCapacitySummary", "AvailabilityZoneId"),
    ("sagemaker", "ClusterInstanceStatus", "AttachInProgress"),
    ("sagemaker", "ClusterInstanceStatus", "DetachInProgress"),
    ("sagemaker", "ClusterInstanceGroupDetails", "ImageVersionStatus"),
    ("sagemaker", "ClusterSummary", "ImageVersionStatus"),
    ("eks", "Compatibility", "defaultVersion"),
]


def calls() -> set[tuple[str, str]]:
    """(service, operation) of every call: in each file, the services it makes clients of, and every
    method or paginator name there that is an operation of one of them."""
    session = botocore.session.get_session()
    available, found = set(session.get_available_services()), set(HANDED_IN)
    for path in (p for folder in ("cli", "infra", "stacks", "addons") for p in (ROOT / folder).rglob("*.py")):
        text = path.read_text()
        services = {s for s in re.findall(r'(?:aws|client)\(\s*"([a-z0-9-]+)"', text) if s in available}
        names = set(re.findall(r"\.([a-z_0-9]+)\(", text)) | set(re.findall(r'get_paginator\("([a-z_0-9]+)"\)', text))
        for service in services:
            operations = {xform_name(o): o for o in session.get_service_model(service).operation_names}
            found |= {(service, operations[n]) for n in names - SKIP if n in operations}
    return found


def test_every_call_and_member_read_is_in_the_installed_models():
    session = botocore.session.get_session()
    made = calls()
    # The newest calls are found, so the scan sees what the floor was chosen for.
    assert {("sagemaker", "ListClusterOperations"), ("sagemaker", "DescribeClusterOperation"),
            ("sagemaker", "ListCapacityReservations"), ("sagemaker", "DescribeTrainingPlan"),
            ("ec2", "DescribeAvailabilityZones"), ("eks", "DescribeAddonVersions")} <= made
    for service, operation in made:
        assert operation in session.get_service_model(service).operation_names, (service, operation)
    for service, shape, member in READ:
        found = session.get_service_model(service).shape_for(shape)
        assert member in (getattr(found, "members", None) or getattr(found, "enum", [])), (service, shape, member)
