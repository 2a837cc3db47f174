"""CloudFormation's resource schemas as cfn-lint ships them, read as plain JSON: per region,
which resource types exist and what each property accepts. Config checks take patterns and
lengths from here instead of copying them (and stay fast: no cfn-lint import, no jsii)."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path


def _schemas() -> Path:
    spec = importlib.util.find_spec("cfnlint")  # locates the package without importing it
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "schemas"


@lru_cache(maxsize=None)
def _provider(region: str) -> dict[str, str] | None:
    path = _schemas() / "providers" / f"{region}.json"
    return json.loads(path.read_text()) if path.exists() else None


def known_region(region: str) -> bool:
    return _provider(region) is not None


def regions_with(resource_types: list[str]) -> list[str]:
    """The regions whose CloudFormation offers every one of `resource_types` (cfn-lint's per-region lists)."""
    return sorted(p.stem for p in (_schemas() / "providers").glob("*.json")
                  if all(region_has(p.stem, t) for t in resource_types))


def region_has(region: str, resource_type: str) -> bool:
    """Whether CloudFormation offers `resource_type` in `region` (cfn-lint's per-region list)."""
    provider = _provider(region)
    return provider is not None and resource_type in provider


@lru_cache(maxsize=None)
def resource(resource_type: str, region: str = "us-east-1") -> dict:
    digest = _provider(region)[resource_type]
    return json.loads((_schemas() / "resources" / f"{digest}.json").read_text())


def source(resource_type: str, region: str = "us-east-1") -> str:
    """Where a resource type's schema is read from, as a reader finds it: the cfn-lint release
    and the file under its package (the provider list of the region names the file)."""
    import importlib.metadata

    digest = _provider(region)[resource_type]
    return f"cfn-lint {importlib.metadata.version('cfn-lint')} cfnlint/data/schemas/resources/{digest}.json ({resource_type})"


def definition(resource_type: str, name: str) -> dict:
    """One of the schema's definitions, e.g. ('AWS::SageMaker::Cluster', 'Tag')."""
    return resource(resource_type)["definitions"][name]


def matches(rule: dict, value: str) -> bool:
    """`value` against a string property's minLength, maxLength and pattern (ECMA-style
    patterns with \\p{...} classes, which the `regex` module reads)."""
    import regex

    if not rule.get("minLength", 0) <= len(value) <= rule.get("maxLength", len(value)):
        return False
    return "pattern" not in rule or regex.search(rule["pattern"], value) is not None


def describe(rule: dict) -> str:
    """What a rule allows, in words a person can act on."""
    parts = [rule["description"].split(". ")[0].rstrip(".")] if rule.get("description") else []
    lengths = (rule.get("minLength"), rule.get("maxLength"))
    if any(v is not None for v in lengths):
        parts.append(f"{lengths[0] or 0}-{lengths[1] or 'any'} characters")
    return "; ".join(parts)
