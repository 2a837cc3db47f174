"""Validation: cdk.json context -> one checked `Settings`, or every problem in one line each.

It parses the models (infra/config: each field against its own limits) and then runs the rules
that span fields over them, from the layer above (infra/checks, one module per area, with
admission, prerequisites and the services' limits), in one order: the areas' own checks,
then the prerequisites table, then the schemas' limits for the fields nothing above has named.
The CLI, `cdk synth` (app.py) and the tests load settings here and nowhere else.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from infra import prerequisites
from infra.checks.acceptance import check_acceptance
from infra.checks.addons import check_addons
from infra.checks.eks import check_eks
from infra.checks.governance import check_governance
from infra.checks.inference import check_inference
from infra.checks.hyperpod import check_autoscaling, check_chart, check_existing_execution_role, check_instance_groups, check_volume_encryption
from infra.checks.limits import check_limits
from infra.checks.network import check_network
from infra.checks.operations import check_operations
from infra.checks.sample_job import check_admission, check_sample_job
from infra.checks.settings import check_names, check_region, environment_clashes
from infra.checks.storage import check_fsx
from infra.config.base import ConfigError, Problems
from infra.config.delivery import check_delivery
from infra.config.loading import DEFAULT_ENV, _path, _pydantic_lines, deep_merge, merged_environment
from infra.config.settings import Settings


def load_settings(context: Mapping[str, Any], env: str | None = None) -> tuple[Settings, list[str]]:
    """Return the validated settings of `env` and its warnings, or raise ConfigError."""
    env = env or DEFAULT_ENV
    raw = merged_environment(context, env)
    raw.pop("env_name", None)
    try:
        # Strict, from JSON: a number is a number and a string a string in every field
        # ("2" is not a count, 1.3 is not a version), as the services read them.
        settings = Settings.model_validate_json(json.dumps({**raw, "env_name": env}), strict=True)
    except ValidationError as exc:
        lines = _pydantic_lines(exc)
        raise ConfigError([f"{env}: {line}" for line in lines + _rules_without(raw, env, exc, lines)]) from None
    # The one rule that reads the other environments of cdk.json: names unique per account and region.
    clashes = [f"{env}: {line}" for line in environment_clashes(context, settings)]
    try:
        warnings = check(settings)
    except ConfigError as err:
        raise ConfigError(err.problems + clashes, err.warnings) from None
    if clashes:
        raise ConfigError(clashes, warnings)
    return settings, warnings


def _rules_without(raw: dict, env: str, exc: ValidationError, lines: list[str]) -> list[str]:
    """The rules that span fields, run on the config without the fields that failed their own
    check (each back to its default), so that one run says every problem. A rule's line about
    a failed field (or one inside it) is left out: that field's own line said it. Where the
    config does not parse even so (a required field failed), or a whole section is written under
    an unknown name, the fields' lines are all."""
    trimmed = copy.deepcopy(raw)
    failed = []
    if any(err["type"] == "extra_forbidden" and len(err["loc"]) == 1 for err in exc.errors(include_url=False)):
        # A section under a name the config does not know (a misspelling): what it holds is unread, so a rule
        # would judge the section's defaults instead ("teams: (none)") and say the same mistake again.
        return []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
        parent = trimmed
        for part in loc[:-1]:
            parent = parent[part] if isinstance(parent, (dict, list)) and _has(parent, part) else None
        if isinstance(parent, dict) and loc and loc[-1] in parent:
            del parent[loc[-1]]
            failed.append(_path(loc))
    if not failed:
        return []
    try:
        settings = Settings.model_validate_json(json.dumps({**trimmed, "env_name": env}), strict=True)
    except ValidationError:
        return []
    errors, _ = _cross_checks(settings)
    said = {line.split(":", 1)[0] for line in lines}
    return [e for e in errors if not any(e.startswith((f, f"{f}.", f"{f}[")) or e.split(":", 1)[0] in said for f in failed)]


def _has(container, part) -> bool:
    return part in container if isinstance(container, dict) else isinstance(part, int) and part < len(container)


def override(settings: Settings, patch: Mapping[str, Any]) -> tuple[Settings, list[str]]:
    """`settings` with `patch` merged over it, parsed and checked exactly as cdk.json is
    (every field limit, every cross rule): CLI overrides get no looser rules."""
    # Only what was given: a field set equal to its default is still set, and one left out
    # stays left out (rules that ask whether a field was given see the same answer).
    raw = deep_merge(settings.model_dump(mode="json", exclude_unset=True), patch)
    try:
        patched = Settings.model_validate_json(json.dumps(raw), strict=True)
    except ValidationError as exc:
        raise ConfigError([f"{settings.env_name}: {line}" for line in _pydantic_lines(exc)]) from None
    return patched, check(patched)


def check(settings: Settings) -> list[str]:
    """Run the cross-field rules on already-parsed settings (also after CLI overrides):
    raise ConfigError on errors, return the warnings."""
    env = settings.env_name
    errors, warnings = _cross_checks(settings)
    warnings = [f"{env}: {line}" for line in warnings]
    if errors:
        raise ConfigError([f"{env}: {line}" for line in errors], warnings)
    return warnings


def _cross_checks(s: Settings) -> tuple[list[str], list[str]]:
    p = Problems()
    check_names(s, p)
    check_region(s, p)
    check_network(s, p)
    check_eks(s, p)
    check_instance_groups(s, p)
    check_autoscaling(s, p)
    check_volume_encryption(s, p)
    check_existing_execution_role(s, p)
    check_fsx(s, p)
    check_addons(s, p)
    check_chart(s, p)
    check_governance(s, p)
    check_sample_job(s, p)
    check_admission(s, p)
    check_inference(s, p)
    check_acceptance(s, p)
    check_operations(s, p)
    check_delivery(s.delivery, p)
    # What each feature needs beside it, from one table (after the areas' own rules, so a
    # field they named keeps their line).
    prerequisites.check(s, p)
    # Last: the schemas' limits, for fields no rule above has named already.
    check_limits(s, p)
    return p.errors, p.warnings
