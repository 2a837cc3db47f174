"""Who a person approves before the pipeline deploys, and where the pipeline runs, as a change
moves them: what the pipeline's self-mutation applies before any approval, so the pull request
is the one place a person sees it first.

The environment that holds the `delivery` block is where these show (its review is the
pipeline's). Who is approved is `DeliverySettings.approved` over the waves as the pipeline loads
them (addons.registry.pipeline), on each side of the change; nothing here re-derives it. Each
callout names the cdk.json field that changed it (its anchor, cli/review/sarif.py): a field of
another environment as `<env>:<field>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cli.review import config_diff
from infra import config


@dataclass(frozen=True)
class Pipeline:
    holder: str  # the environment whose config holds the delivery block
    where: str  # aws://account/region the pipeline runs in
    approved: frozenset[str]
    deployed: frozenset[str]  # every environment of the waves
    protected: tuple[str, ...] | None  # delivery.protected as configured
    account_set: bool  # delivery.account / delivery.region written (else the holder's own)
    region_set: bool


def holders(context: dict) -> list[str]:
    """The environments whose merged config holds a delivery block."""
    return [env for env in config.environment_names(context) if config_diff.merged(context, env).get("delivery") is not None]


def pipeline(context: dict) -> Pipeline | None | str:
    """The pipeline a cdk.json context builds, None without one, or a line saying why it does not load."""
    from addons import registry

    found = holders(context)
    if not found:
        return None
    try:
        settings, _, waves = registry.load(context, found[0])
    except config.ConfigError as err:
        return err.problems[0]
    d = settings.delivery
    return Pipeline(
        holder=settings.env_name,
        where=f"aws://{d.account or settings.account}/{d.region or settings.region}",
        approved=frozenset(d.approved(waves)),
        deployed=frozenset(d.environments),
        protected=d.protected,
        account_set=d.account is not None,
        region_set=d.region is not None,
    )


def compare(old_context: dict, new_context: dict, env: str) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """(callouts, anchors: callout -> the fields behind it, notes) for the review of `env`, where
    `env` holds the delivery block after the change (or before it, where the change removes it)."""
    old, new = pipeline(old_context), pipeline(new_context)
    home = new.holder if isinstance(new, Pipeline) else old.holder if isinstance(old, Pipeline) else None
    if home != env:
        return [], {}, []
    notes = [f"the {side} pipeline does not load ({line}): who it approves is not compared"
             for side, line in (("baseline's", old), ("changed", new)) if isinstance(line, str)]
    if isinstance(old, str) or isinstance(new, str):
        return [], {}, notes
    callouts: dict[str, list[str]] = {}
    now_deployed = new.deployed if new else frozenset()
    before, after = (old.approved if old else frozenset()), (new.approved if new else frozenset())
    for name in sorted(before - after):
        if name not in now_deployed:
            continue  # the pipeline no longer deploys it at all
        why, fields = _why_not(name, new, old_context, new_context)
        callouts[
            f"APPROVAL REMOVED: the pipeline now deploys {name} with no person's approval ({why}); its self-mutation applies "
            "this to the pipeline before any approval, so this pull request is where it is approved or stopped"
        ] = fields
    for name in sorted(after - before):
        why = "delivery.protected names it" if new.protected is not None else "its stacks have termination protection"
        callouts[f"APPROVAL ADDED: the pipeline now waits for a person's approval before {name}'s stage ({why})"] = \
            ["delivery.protected"] if new.protected is not None else [f"{name}:protection.termination_protection", "delivery"]
    if old and new and (old.where, old.holder) != (new.where, new.holder):
        moved = [f"from {old.where} to {new.where}"] if old.where != new.where else []
        moved += [f"its delivery block from {old.holder}'s config to {new.holder}'s"] if old.holder != new.holder else []
        fields = []
        if old.where.split("/")[2] != new.where.split("/")[2]:
            fields += ["delivery.account"] if new.account_set else ["delivery.account", "account"]
        if old.where.split("/")[3] != new.where.split("/")[3]:
            fields += ["delivery.region"] if new.region_set else ["delivery.region", "region"]
        callouts[
            f"PIPELINE MOVED: the pipeline moves {' and '.join(moved)}: a new pipeline is made there, every account of its "
            "waves must trust it (cdk bootstrap --trust) to deploy, and the old one stays deployed, running on every push "
            "until it is destroyed"
        ] = fields or ["delivery"]
    return list(callouts), callouts, notes


def _why_not(name: str, new: Pipeline, old_context: dict, new_context: dict) -> tuple[str, list[str]]:
    """Why `name` is no longer approved after the change, and the field that says so."""
    if new.protected is not None:
        return "delivery.protected does not name it", ["delivery.protected", "delivery"]
    tp = lambda context: config_diff.merged(context, name).get("protection", {}).get("termination_protection")  # noqa: E731
    if tp(old_context) != tp(new_context):
        return ("delivery.protected is unset and its termination protection is off: the default approves the environments "
                "whose stacks have it"), [f"{name}:protection.termination_protection", "delivery"]
    return "delivery.protected is unset and its stacks have no termination protection", ["delivery"]
