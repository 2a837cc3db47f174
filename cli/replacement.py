"""Which template changes replace a resource, judged from cfn-lint's resource schemas.

A resource type's schema lists `createOnlyProperties` as JSON pointers
(`/properties/VpcConfig`, `/properties/Orchestrator/Eks`); changing a value under any of
them makes CloudFormation replace the resource.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_MISSING = object()


@lru_cache(maxsize=None)
def create_only_pointers(resource_type: str, region: str = "us-east-1") -> tuple[str, ...]:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER  # slow import: only when asked
    from cfnlint.schema._exceptions import ResourceNotFoundError

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type).schema
    except ResourceNotFoundError:
        return ()
    return tuple(schema.get("createOnlyProperties", ()))


def _resolve(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if head == "*":
        if not isinstance(value, list):
            return _MISSING
        return [_resolve(v, rest) for v in value]
    if isinstance(value, dict) and head in value:
        return _resolve(value[head], rest)
    return _MISSING


def create_only_values(resource: dict, region: str = "us-east-1") -> dict[str, Any]:
    """pointer -> the value found there (absent pointers are left out)."""
    out = {}
    for pointer in create_only_pointers(resource["Type"], region):
        parts = pointer.strip("/").split("/")
        if parts[0] != "properties":
            continue
        found = _resolve(resource.get("Properties", {}), parts[1:])
        if found is not _MISSING:
            out[pointer] = found
    return out


def replaced_by(old: dict, new: dict, region: str = "us-east-1") -> list[str]:
    """The create-only pointers whose value differs between two versions of a resource."""
    if old["Type"] != new["Type"]:
        return ["Type"]
    before, after = create_only_values(old, region), create_only_values(new, region)
    return sorted(p for p in set(before) | set(after) if before.get(p, _MISSING) != after.get(p, _MISSING))
