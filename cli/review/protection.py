"""What a change takes away from an environment's protection, its teams' isolation or its
currency, read from the config on each side (cli/review/config_diff.merged, so a baseline's
config that today's rules refuse still says what it was) and, where the templates say more,
from them:

- PROTECTION OFF: `protection.retain_data` or `protection.termination_protection` turned off:
  the stateful resources now deleted with their stacks, or the stacks one delete removes;
- POD SECURITY LOWERED: a team's namespace enforces a weaker Pod Security Standard;
- PIN REMOVED: an add-on's pinned version is unset: EKS keeps the installed version and this
  config no longer says which it is (the reference: "unset: EKS's default at create, kept since");
- ENVIRONMENT MOVED: the environment deploys to another account or region: a first deploy there,
  while the old stacks, their data and their cost stay behind (`moved`, from main's first deploy).

Each callout says the before and the after, what it costs, and the cdk.json field that changed
it (its anchor, cli/review/sarif.py).
"""

from __future__ import annotations

from cli.review import config_diff

# infra/config/governance.py Team.pod_security, weakest last (Kubernetes' Pod Security Standards:
# privileged < baseline < restricted).
POD_SECURITY_ORDER = ("restricted", "baseline", "privileged")
# infra/config/settings.py ProtectionSettings' defaults: a side that does not write a field has these.
PROTECTION_DEFAULTS = {"retain_data": True, "termination_protection": True}
# Where the config pins an add-on's version: eks.core_addons.<name>.version and addons.<name>.version.
PIN_BLOCKS = ("eks.core_addons", "addons")


def _protection(context: dict, env: str, field: str) -> bool:
    value = (config_diff.merged(context, env).get("protection") or {}).get(field, PROTECTION_DEFAULTS[field])
    return value is not False


def compare(old_context: dict, new_context: dict, env: str, before=None, after=None,
            stacks: list[str] | None = None) -> list[tuple[str, list[str]]]:
    """[(callout, the fields behind it)] for `env`, present on both sides. before/after: the
    StackSummary lists (the stateful resources each side deletes); stacks: this change's stack names."""
    from cli.review import exposure

    if env not in (old_context.get("environments") or {}) or env not in (new_context.get("environments") or {}):
        return []
    out: list[tuple[str, list[str]]] = []
    if _protection(old_context, env, "retain_data") and not _protection(new_context, env, "retain_data"):
        kept = {(r["stack"], r["id"]): r for r in exposure.stateful(before or []) if r["deletion_policy"] != "Delete"}
        lost = [r for r in exposure.stateful(after or []) if r["deletion_policy"] == "Delete" and (r["stack"], r["id"]) in kept]
        named = _kinds(lost) if lost else "its buckets, keys, log groups and Prometheus workspace"
        out.append((
            f"PROTECTION OFF: {env} no longer keeps its data when a stack is deleted (protection.retain_data true -> false): "
            f"{named} are deleted with their stacks from now on, and what they hold (checkpoints, training data, logs) is "
            "lost with them; nothing is saved while they stand", ["protection.retain_data", "protection"]))
    if _protection(old_context, env, "termination_protection") and not _protection(new_context, env, "termination_protection"):
        count = f"its {len(stacks)} stacks" if stacks else "its stacks"
        out.append((
            f"PROTECTION OFF: {env}'s stacks lose termination protection (protection.termination_protection true -> false): "
            f"{count} (the EKS and HyperPod clusters among them) are deleted by one `cdk destroy` or console click, with no "
            "step that must be undone first; a cluster deleted by mistake is a first deploy again, nodes and all",
            ["protection.termination_protection", "protection"]))
    out += _pod_security(old_context, new_context, env)
    out += _pins(old_context, new_context, env)
    return out


def _kinds(rows: list[dict]) -> str:
    from collections import Counter

    counts = Counter(r["type"].split("::")[-1] for r in rows)
    return ", ".join(f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in sorted(counts.items()))


def _teams(context: dict, env: str) -> dict[str, dict]:
    teams = (config_diff.merged(context, env).get("governance") or {}).get("teams") or []
    return {t["name"]: t for t in teams if isinstance(t, dict) and isinstance(t.get("name"), str)}


def _pod_security(old_context: dict, new_context: dict, env: str) -> list[tuple[str, list[str]]]:
    out = []
    old, new = _teams(old_context, env), _teams(new_context, env)
    for name in [n for n in new if n in old]:
        was, now = (str(t.get("pod_security", POD_SECURITY_ORDER[0])) for t in (old[name], new[name]))
        if was in POD_SECURITY_ORDER and now in POD_SECURITY_ORDER and POD_SECURITY_ORDER.index(now) > POD_SECURITY_ORDER.index(was):
            out.append((
                f"POD SECURITY LOWERED: team {name}'s namespace enforces the {now} Pod Security Standard instead of {was} "
                f"(governance.teams[{name}].pod_security {was} -> {now}): its pods may now run as root, escalate privileges and "
                "keep Linux capabilities on the shared GPU nodes; warnings and audit events still name what restricted refuses",
                [f"governance.teams[{name}].pod_security"]))
    return out


def _pins(old_context: dict, new_context: dict, env: str) -> list[tuple[str, list[str]]]:
    out = []
    old, new = (config_diff.flatten(config_diff.merged(c, env)) for c in (old_context, new_context))
    for path, version in old.items():
        block = next((b for b in PIN_BLOCKS if path.startswith(b + ".")), None)
        if block is None or not path.endswith(".version") or not isinstance(version, str) or new.get(path) is not None:
            continue
        addon = path[len(block) + 1:-len(".version")]
        if "." in addon:
            continue
        out.append((
            f"PIN REMOVED: add-on {addon} is no longer pinned ({path} {version} -> unset): EKS keeps the version installed now "
            f"({version} where the last deploy pinned it) and no update moves it, a cluster upgrade included; this config no "
            "longer says which version runs, so `upgrade-plan` and the review cannot check it", [path, block]))
    return out


def moved(old_context: dict, new_context: dict, env: str, old_where: str, new_where: str) -> tuple[str, list[str]]:
    """The callout of an environment that deploys to another account or region than the baseline's:
    a first deploy there, and the old stacks, their data and their cost left where they were."""
    from infra import naming

    block = config_diff.merged(old_context, env)
    prefix = block.get("prefix") if isinstance(block.get("prefix"), str) else "<prefix>"
    stacks = [naming.stack_name(prefix, env, suffix) for suffix in naming.STACK_SUFFIXES]
    hourly = instances_hourly(block)
    cost = f"about ${hourly:,.2f} an hour in instances alone" if hourly else "their cost"
    fields = [f for f, a, b in (("account", old_where.split("/")[2], new_where.split("/")[2]),
                                ("region", old_where.split("/")[3], new_where.split("/")[3])) if a != b]
    return (
        f"ENVIRONMENT MOVED: {env} moves from {old_where} to {new_where} ({', '.join(fields)}): this is a first deploy there "
        f"(every stack, the clusters and their nodes new, no data of the old ones), while in {old_where} its stacks stay "
        f"deployed and nothing deploys them any more ({', '.join(stacks)}, those of them deployed): the EKS and HyperPod "
        f"clusters, the data their buckets and file systems hold, and {cost} keep running until they are destroyed from the "
        f"base (`bin/cdk destroy --all -c env={env}` before this merges, docs/deploying.md)",
        fields or ["account"],
    )


def instances_hourly(block: dict) -> float | None:
    """What an environment's instance groups cost an hour at the review's rates, from its config
    block alone (a baseline that is not synthesized); None where a type has no rate."""
    from cli.review.prices import instance_rate

    total = 0.0
    for group in (block.get("hyperpod") or {}).get("instance_groups") or []:
        if not isinstance(group, dict) or not isinstance(group.get("count"), int):
            continue
        rate, _ = instance_rate(str(group.get("instance_type")))
        if rate is None:
            return None
        total += rate * group["count"]
    return total or None
