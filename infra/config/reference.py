"""The configuration reference, written from the models: every field's path, type, default
(the model's, and what `cdk.json`'s `defaults` block sets), description and limits (the
model's own and those read from the services' definitions in limits.py).

    python -m infra.config.reference > docs/config-reference.md

The page has one source, these models: a test writes it again and fails where the committed
page differs (tests/test_docs.py).
"""

from __future__ import annotations

import functools
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from infra.config import limits
from infra.config.loading import bare_annotation, fields, is_list, is_optional, model_of
from infra.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m infra.config.reference > docs/config-reference.md"

INTRO = f"""# Configuration reference

Every field of an environment's config, written by `{COMMAND}` from the config
models in `infra/config/` (their descriptions, types, defaults and limits) and the `defaults`
block of `cdk.json`; a test writes it again and fails where this page differs. How the blocks
merge, and what validation checks across fields: [configuration.md](configuration.md).

- **default** is the model's: what a field that no block sets gets (*required*: it has none;
  *unset*: no value, the feature off or derived as the description says).
- **cdk.json defaults** is what the committed `cdk.json` sets in `context.defaults` (blank: it
  sets nothing there). Each environment's block (`environments.dev`, `environments.prod`) is
  merged over it.
- **limits** are the model's own and those read from the services' definitions
  (`infra/config/limits.py`: a CloudFormation schema in cfn-lint, an API shape in botocore, a
  grammar), each named with its source.
- `[]` steps into each item of a list; values are written as JSON, as `cdk.json` takes them.
"""


def _args(annotation: Any) -> tuple:
    return typing.get_args(annotation)


def type_text(annotation: Any) -> str:
    bare = bare_annotation(annotation)
    origin = typing.get_origin(bare)
    if origin is Literal:
        values = _args(bare)
        return "int" if all(isinstance(v, int) for v in values) else " | ".join(json.dumps(v) for v in values)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in _args(bare))
    if origin is tuple:
        item = bare_annotation(_args(bare)[0])
        if isinstance(item, type) and issubclass(item, BaseModel):
            return "list of objects"
        return f"list of {type_text(item)}"
    if origin is dict:
        value = _args(bare)[1]
        return "map" if value is Any else f"map of {type_text(value)}"
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        return "object"
    return {bool: "bool", int: "int", float: "number", str: "string"}.get(bare, "IPv4 CIDR" if "IPv4Network" in str(bare) else str(bare))


def _json(value: Any) -> str:
    return json.dumps(to_jsonable_python(value), separators=(", ", ": "))


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "*required*"
    value = field.get_default()
    if value is None:
        return "*unset*"
    if isinstance(value, BaseModel):
        return "*its fields'*"
    return f"`{_json(value)}`"


def cdk_json_text(path: str, defaults: dict, field: FieldInfo) -> str:
    """What `cdk.json`'s defaults block sets at `path`; blank inside list items (their list's row
    shows the whole list) and for objects (their fields' rows show what is set)."""
    if "[]" in path:
        return ""
    node: Any = defaults
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return ""
        node = node[part]
    if model_of(field.annotation) is not None and not is_list(field.annotation):
        return ""
    return f"`{_json(node)}`"


def _words(rules: dict) -> str:
    """A source's limits in words."""
    out = []
    if "minimum" in rules or "maximum" in rules:
        out.append(f"{rules.get('minimum', '')}-{rules.get('maximum', '')}".strip("-") if "minimum" in rules and "maximum" in rules
                   else f"at least {rules['minimum']}" if "minimum" in rules else f"at most {rules['maximum']}")
    for kind, unit in (("Items", "item"), ("Properties", "entry"), ("Length", "character")):
        low, high = rules.get(f"min{kind}"), rules.get(f"max{kind}")
        if high is not None:
            out.append(f"{low}-{high} {_plural(unit, high)}" if low else f"at most {high} {_plural(unit, high)}")
        elif low:
            out.append(f"at least {low} {_plural(unit, low)}")
    if "enum" in rules:
        out.append("one of " + ", ".join(map(str, rules["enum"])))
    if "pattern" in rules:
        out.append(f"pattern `{rules['pattern']}`")
    if "grammar" in rules:
        out.append(rules["grammar"])
    if rules.get("type") == "string":
        out.append(f"a JSON string ({rules['format']})" if rules.get("format") else "a JSON string")
    return ", ".join(out)


def _plural(unit: str, n: int) -> str:
    return unit if n == 1 else ("entries" if unit == "entry" else f"{unit}s")


def model_limits(field: FieldInfo) -> list[str]:
    """The limits the model states: numeric bounds, lengths, patterns, and those of a list's items."""
    rules: dict = {}
    for meta in field.metadata:
        for attr, key in (("ge", "minimum"), ("le", "maximum"), ("pattern", "pattern")):
            if getattr(meta, attr, None) is not None:
                rules[key] = getattr(meta, attr)
        for attr, key in (("min_length", "min"), ("max_length", "max")):
            if getattr(meta, attr, None) is not None:
                rules[key + ("Items" if is_list(field.annotation) or typing.get_origin(bare_annotation(field.annotation)) is dict else "Length")] = getattr(meta, attr)
    bare = bare_annotation(field.annotation)
    if typing.get_origin(bare) is Literal and all(isinstance(v, int) for v in _args(bare)):
        rules["enum"] = list(_args(bare))
    rules.update(_annotated_pattern(_unoptional(field.annotation)))
    out = [_words(rules)] if rules else []
    item_rules = _annotated_pattern(_args(bare)[0]) if typing.get_origin(bare) is tuple else {}
    if item_rules:
        out.append(f"each item: {_words(item_rules)}")
    return out


def _unoptional(annotation: Any) -> Any:
    rest = [a for a in _args(annotation) if a is not type(None)] if is_optional(annotation) else [annotation]
    return rest[0] if len(rest) == 1 else annotation


def _annotated_pattern(annotation: Any) -> dict:
    """The pattern an Annotated type carries (a subnet ID, a route table ID)."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return {}
    return {"pattern": m.pattern for m in _args(annotation)[1:] if getattr(m, "pattern", None)}


def service_limits(path: str) -> list[str]:
    """The limits limits.py reads from the services for this field, its items, keys and values."""
    found = [(path, limits.tags_limit())] if path == "tags" else []
    found += [(key, limit) for key, limit in limits.FIELDS.items() if _owners()[key] == path]
    out = []
    for key, limit in found:
        rest = key[len(path):]
        where = {"": "", "[]": "each item: ", "{}": "each key: ", "{=}": "each value: "}.get(rest, f"`{rest.lstrip('.').replace('{=}', '.*')}`: ")
        note = f", {limit.note}" if limit.note else ""
        source = "" if isinstance(limit.source, limits.Grammar) else f" ({limit.source}{note})"  # a grammar's words name it
        out.append(f"{where}{_words(limits.constraints(limit.source))}{source}")
    return out


@functools.cache
def _owners() -> dict[str, str]:
    """The field whose row shows each limits.py key: the longest field path the key starts with (a
    key may step into a field's items `[]`, keys `{}`, values `{=}` or a free-form mapping's keys)."""
    paths = [p for p, _ in fields(Settings)]
    return {key: max((p for p in paths if key == p or key.startswith((f"{p}[]", f"{p}{{", f"{p}."))), key=len) for key in limits.FIELDS}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def row(path: str, field: FieldInfo, defaults: dict) -> str:
    services = service_limits(path)
    # A model limit the service states too (a Literal of the schema's enum) is shown once, with its source.
    limits_text = "; ".join([m for m in model_limits(field) if not any(m in s for s in services)] + services)
    description = field.description + (f" **Limits:** {limits_text}." if limits_text else "")
    cells = [f"`{path}`", type_text(field.annotation), default_text(field), cdk_json_text(path, defaults, field), description]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


HEADER = ["| field | type | default | cdk.json defaults | description |", "|---|---|---|---|---|"]


def render(defaults: dict) -> str:
    """The whole page, for the models as they are and `defaults` (cdk.json's context.defaults)."""
    out = [INTRO]
    top = [(p, f) for p, f in fields(Settings) if "." not in p and (model_of(f.annotation) is None or is_list(f.annotation))]
    out += ["## Top level", "", *HEADER, *(row(p, f, defaults) for p, f in top), ""]
    for name, field in Settings.model_fields.items():
        model = model_of(field.annotation)
        if name == "env_name" or model is None or is_list(field.annotation):
            continue
        rows = [row(p, f, defaults) for p, f in fields(model, f"{name}.")]
        out += [f"## `{name}`", "", field.description + (" *Required.*" if field.is_required() else ""), "", *HEADER, *rows, ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the page for this checkout's cdk.json (or the one given)."""
    path = Path(argv[0]) if argv else ROOT / "cdk.json"
    context = json.loads(path.read_text())["context"]
    sys.stdout.write(render(context.get("defaults") or {}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
