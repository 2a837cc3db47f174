"""An environment the change removes or renames: the baseline revision's cdk.json has it and
this one does not. Its stacks stay deployed, and nothing deploys them any more (cdk deploy and
the pipeline deploy what cdk.json names): the review says so in one callout, with nothing to
synthesize."""

from __future__ import annotations

from pathlib import Path

from cli import revision
from cli.review import config_diff


def find(context: dict, env: str, against: list[str], repo: Path | None) -> dict | None:
    """What the one git revision of `against` deploys as `env`, where this cdk.json `context` has
    no such environment and that revision's has; else None."""
    from cli.review.changes import git_revision
    from infra import config

    if env in config.environment_names(context) or len(against) != 1:
        return None
    commit = git_revision(against[0], repo)
    return left_behind(repo, against[0], commit, env) if commit else None


def left_behind(repo: Path, spec: str, commit: str, env: str) -> dict | None:
    """`env` as the revision's cdk.json deploys it: where, its stacks, and the callout; None where
    the revision has no such environment either."""
    from infra import naming
    from infra.config import ConfigError
    from infra.validation import load_settings

    committed = revision.committed_context(repo, commit)
    if committed is None or env not in (committed.get("environments") or {}):
        return None
    description = f"{spec} ({commit[:12]})"
    block = config_diff.merged(committed, env)
    where = f"aws://{block.get('account')}/{block.get('region')}"
    try:  # its stack names as today's code names them; a config today's rules refuse is named by its pattern
        settings, _ = load_settings(committed, env)
        stacks = [settings.stack_name(suffix) for suffix in naming.STACK_SUFFIXES]
        pipeline = settings.stack_name("delivery") if settings.delivery is not None else None
    except ConfigError:
        stacks, pipeline = [f"{block.get('prefix', '<prefix>')}-{env}-*"], None
    line = (f"ENVIRONMENT LEFT BEHIND: {env} is in the cdk.json of {description} and not in this change's (removed or "
            f"renamed): its stacks stay deployed in {where} and nothing deploys them ({', '.join(stacks)}, those of them "
            f"deployed); destroy them from the base first (`bin/cdk destroy --all -c env={env}`, docs/deploying.md) "
            "or keep the environment")
    if pipeline:
        line += (f". It holds the delivery block: its pipeline {pipeline} stays deployed and goes on running on every push, "
                 "its synth failing from now on")
    return {"against": description, "env": env, "where": where, "stacks": stacks, "callout": line}
