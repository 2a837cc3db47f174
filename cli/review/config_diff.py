"""Which config fields a change touches: one environment's merged cdk.json block (its own
fields over `defaults`, as infra.config merges them) before and after, as field paths.

The paths are the ones error lines and SARIF places use: `hyperpod.instance_groups[gpu].count`,
a named list item by its name (instance groups, teams), `governance.teams[ml-research].principals`
for a list of plain values. An item added or removed is a path of its own, before the paths
of what it holds; an item that is only changed is not (its changed fields are).

Every assembly `cli.synth` writes carries the config it was made of (CONFIG_FILE), so a
baseline synthesized earlier, or by a test, says what it was built from.
"""

from __future__ import annotations

import json
from pathlib import Path

from infra.config.loading import deep_merge

# Beside manifest.json: {"env": NAME, "context": cdk.json's context without CDK's feature flags}.
CONFIG_FILE = "hyperpod-cdk.config.json"


def record(outdir: Path, context: dict, env: str) -> None:
    """Write what an assembly is made of into it."""
    settings_only = {k: v for k, v in context.items() if not k.startswith("@")}
    (outdir / CONFIG_FILE).write_text(json.dumps({"env": env, "context": settings_only}, indent=1))


def recorded(outdir: Path) -> tuple[dict, str] | None:
    """(context, env) an assembly was made of, where it says."""
    path = outdir / CONFIG_FILE
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    return doc["context"], doc["env"]


def merged(context: dict, env: str) -> dict:
    """The environment's fields as the config reads them (nothing checked: a baseline's config
    may not load under today's rules, and its fields still say what changed)."""
    envs = context.get("environments") if isinstance(context, dict) else None
    block = envs.get(env) if isinstance(envs, dict) else None
    defaults = context.get("defaults") if isinstance(context, dict) else None
    return deep_merge(defaults if isinstance(defaults, dict) else {}, block if isinstance(block, dict) else {})


def _named(items: list) -> bool:
    return bool(items) and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)


def flatten(value, path: str = "") -> dict[str, object]:
    """path -> value of every field: a mapping by its keys, a list of named items by name, any
    other list as one value."""
    out: dict[str, object] = {}
    if isinstance(value, dict) and (value or not path):
        for key, item in value.items():
            out |= flatten(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and _named(value):
        for item in value:
            out[f"{path}[{item['name']}]"] = item
            out |= flatten({k: v for k, v in item.items() if k != "name"}, f"{path}[{item['name']}]")
    else:
        out[path] = value
    return out


def changed(old: dict, new: dict, env: str) -> list[str]:
    """The field paths whose value differs, in the order the new config writes them, then
    the removed ones. A named item counts on its own only where it is added or removed."""
    before, after = flatten(merged(old, env)), flatten(merged(new, env))
    items = {p for p in before.keys() | after.keys() if isinstance((after.get(p) if p in after else before.get(p)), dict) and p.endswith("]")}
    out = []
    for path in [*after, *(p for p in before if p not in after)]:
        if before.get(path, _GONE) == after.get(path, _GONE):
            continue
        if path in items and path in before and path in after:
            continue  # an item changed inside: its fields say where
        out.append(path)
    return out


_GONE = object()


def fingerprint(context: dict, env: str) -> str:
    """What one environment's config is, in a short digest: whether a review written earlier
    (review-<env>.json) was made of the config as it is now."""
    import hashlib

    return hashlib.sha256(json.dumps(merged(context, env), sort_keys=True).encode()).hexdigest()[:16]
