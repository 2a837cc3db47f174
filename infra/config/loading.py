"""cdk.json context -> the environment's raw settings: the deep merge of `defaults` and the
environment's block; the one-line text of a field that fails its own check; and the walk over
every field of the models. Validation (infra/validation.py) parses and checks with these."""

from __future__ import annotations

import copy
import difflib
import json
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Iterator

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from infra import json_text
from infra.config.base import ConfigError, short
from infra.config.settings import Settings


DEFAULT_ENV = "dev"


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else in `override` replaces what `base` had."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def context_from_cdk_cli(environ: Mapping[str, str]) -> dict[str, Any]:
    """The context the CDK CLI hands the app: the JSON of cdk.json and -c flags in
    CDK_CONTEXT_JSON, and what did not fit in the environment in the file that
    CONTEXT_OVERFLOW_LOCATION_ENV names. Read as JSON, so null means null here exactly as
    in `hyperpod-cdk validate` (the CDK library would drop it and fall back to the default)."""
    context = json.loads(environ.get("CDK_CONTEXT_JSON") or "{}")
    overflow = environ.get("CONTEXT_OVERFLOW_LOCATION_ENV")
    if overflow:
        with open(overflow) as handle:
            context.update(json.load(handle))
    return context


def read_cdk_json(text: str, where: str = "cdk.json") -> Any:
    """cdk.json's document, refusing a key written twice in one object: RFC 8259 leaves which of
    the two counts to the reader (the CDK CLI and Python keep the last, silently), so neither is
    taken. One line per repeated key, with the lines of both. A text that is no JSON raises
    ValueError, as json.loads does."""
    repeated = []

    def pairs_hook(pairs):
        keys = [k for k, _ in pairs]
        repeated.extend(k for i, k in enumerate(keys) if k in keys[:i])
        return dict(pairs)

    doc = json.loads(text, object_pairs_hook=pairs_hook)
    if repeated:
        raise ConfigError([f"{where}: {line}" for line in _repeated_keys(text)])
    return doc


def _repeated_keys(text: str) -> list[str]:
    """Each key written twice in one object of a JSON text, with both lines and the object's path."""
    out: list[str] = []
    seen: dict[tuple, dict[str, tuple[int, int]]] = {}  # an object's path -> its keys' first (line, column)
    for path, start, _ in json_text.members(text):
        *parent, key = path
        if isinstance(key, int):
            continue
        line, first = text.count("\n", 0, start) + 1, seen.setdefault(tuple(parent), {})
        column = start - text.rfind("\n", 0, start)  # 1-based
        if key in first:
            where = ".".join(f"[{p}]" if isinstance(p, int) else p for p in parent) or "the top level"
            (was, was_column) = first[key]
            at = f"at line {line}, columns {was_column} and {column}" if was == line else f"at line {was} and line {line}"
            out.append(f'"{key}" is written twice in {where}, {at}: JSON leaves which '
                       "one counts to the reader (RFC 8259; the CDK CLI takes the last), so neither is taken; remove one")
        first.setdefault(key, (line, column))
    return out


def environment_names(context: Mapping[str, Any]) -> list[str]:
    envs = context.get("environments") or {}
    return sorted(envs) if isinstance(envs, Mapping) else []


def merged_environment(context: Mapping[str, Any], env: str) -> dict[str, Any]:
    envs = context.get("environments")
    if not isinstance(envs, Mapping) or not envs:
        raise ConfigError(["environments: missing from cdk.json context; add at least one environment block"])
    if env not in envs:
        raise ConfigError([f"env: {env!r} is not an environment in cdk.json; valid: {', '.join(sorted(envs))}"])
    defaults = context.get("defaults") or {}
    block = envs[env] or {}
    for where, value in (("defaults", defaults), (f"environments.{env}", block)):
        if not isinstance(value, Mapping):
            raise ConfigError([f"{where}: {value!r} must be a mapping of settings"])
    return deep_merge(defaults, block)


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation like Optional[tuple[Team, ...]]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_of(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(loc: tuple) -> list[str]:
    model: type[BaseModel] | None = Settings
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        model = model_of(field.annotation) if field else None
    return sorted(k for k in (model.model_fields if model else {}) if k != "env_name")


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _pydantic_lines(exc: ValidationError) -> list[str]:
    errors = exc.errors(include_url=False)
    # Drop pydantic's tagged-union/function markers so the path is the config path.
    locs = [tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-")))) for err in errors]
    lines = []
    for err, loc in zip(errors, locs):
        path = _path(loc) or "(root)"
        if err["type"] == "too_short" and any(other[: len(loc)] == loc and len(other) > len(loc) for other in locs):
            continue  # pydantic counts only the items that passed: the failed item's own line says it
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc)
            given = str(loc[-1]) if loc else ""
            # The closest field by spelling, else one the given name begins (endpoint -> endpoint_access).
            near = difflib.get_close_matches(given, allowed, n=1, cutoff=0.75) or [k for k in allowed if k.startswith(f"{given}_")][:1]
            lines.append(f"{path}: unknown field;" + (f" did you mean {near[0]}?" if near else "") + f" allowed here: {', '.join(allowed)}")
        elif err["type"] == "missing":
            lines.append(f"{path}: required field is missing")
        elif err["type"] == "string_pattern_mismatch":
            lines.append(f"{path}: {short(err.get('input'))} is invalid: {_PATTERN_WORDS.get(loc[-1], 'does not have the expected form')}")
        elif err["type"] == "string_type" and isinstance(err.get("input"), float):
            lines.append(f"{path}: {err['input']!r} is a number; write it in quotes (\"1.30\" as a number reads 1.3)")
        else:
            lines.append(f"{path}: {short(err.get('input'))} is invalid: {err['msg']}")
    return lines


# What each pattern-checked field allows, in words (pydantic would print the regex).
_PATTERN_WORDS = {
    "version": "must be a Kubernetes minor version in quotes, like \"1.33\"",
    "revision": "must be a full 40-character git commit SHA",
    "saml_metadata_url": "must be an https:// URL",
    "training_plan_arn": "must be a SageMaker training plan ARN, arn:aws:sagemaker:<region>:<account>:training-plan/<name>",
    "subnet_id": "must be a subnet ID, subnet-0123456789abcdef0",
    "route_table_id": "must be a route table ID, rtb-0123456789abcdef0",
    "vpc_id": "must be a VPC ID, vpc-0123456789abcdef0",
    "security_group_id": "must be a security group ID, sg-0123456789abcdef0",
    "existing_security_group_id": "must be a security group ID, sg-0123456789abcdef0",
    "account": "must be a 12-digit AWS account ID",
    "region": "must be an AWS region name, like us-east-1",
    "prefix": "must start with a lowercase letter, then lowercase letters, digits and hyphens, at most 20 characters",
}


def fields(model: type[BaseModel] | None = None, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every config field under `model` (the whole config by default), depth first, as (dotted
    path, its pydantic field); `[]` steps into each item of a list of models."""
    for name, field in (model or Settings).model_fields.items():
        if name == "env_name":  # the environment's name (-c env=NAME), not a field of cdk.json
            continue
        path = f"{prefix}{name}"
        yield path, field
        nested = model_of(field.annotation)
        if nested is not None:
            yield from fields(nested, f"{path}[]." if is_list(field.annotation) else f"{path}.")


def is_optional(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def bare_annotation(annotation: Any) -> Any:
    """The annotation without Optional and Annotated."""
    if typing.get_origin(annotation) is typing.Annotated:
        return bare_annotation(typing.get_args(annotation)[0])
    if is_optional(annotation):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bare_annotation(rest[0]) if len(rest) == 1 else typing.Union[tuple(rest)]
    return annotation


def is_list(annotation: Any) -> bool:
    """Whether a field holds a list (a tuple, optional or not)."""
    return typing.get_origin(bare_annotation(annotation)) is tuple


def field_paths(model: type[BaseModel] | None = None, prefix: str = "") -> list[tuple[str, Any]]:
    """Every config field as (dotted path, default): the leaves, and the lists and optional
    blocks of nested fields, whose own defaults say something."""
    out = []
    for path, field in fields(model, prefix):
        default = "(required)" if field.is_required() else field.get_default()
        if model_of(field.annotation) is None or is_list(field.annotation) or default is None:
            out.append((path, default))
    return out
