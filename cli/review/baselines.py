"""What a review compares with: the baseline its `--against` (or the default, main) names, read
before anything is synthesized, or why there is none: a first deploy, where the baseline lacks the
environment or deploys it elsewhere (and then, where the environment moved, what it leaves behind)."""

from __future__ import annotations

import sys
from pathlib import Path

from cli import fleet
from cli.review import changes, protection


def read(against: list[str], *, asked: bool, context: dict, settings, repo: Path | None, cache: Path):
    """(the baseline, None, None), or (None, why this is a first deploy, the ENVIRONMENT MOVED callout's
    parts or None). Raises changes.BaselineError where the comparison asked for cannot be made: a
    folder or templates named to compare with are refused, as that comparison was asked."""
    env = settings.env_name
    names = None if (len(against) == 1 and Path(against[0]).is_dir()) else fleet.stack_names(context, env)
    target = f"aws://{settings.account}/{settings.region}"
    try:
        baseline = changes.load_baseline(against, names or [], repo=repo, env=env, cache=cache,
                                         progress=lambda line: print(line, file=sys.stderr, flush=True), target=target)
        changes.check_environment(baseline, env, target, fleet.names_by_env(context))
        return baseline, None, None
    except changes.BaselineError as err:
        # A first deploy: the default baseline, or a revision (a pull request's base), lacks the environment or deploys it elsewhere.
        if not isinstance(err, changes.FirstDeploy) or (asked and not err.revision):
            raise
        first_deploy = f"{err.where}: nothing of it is deployed there; reviewed as a first deploy"
        print(f"note: {first_deploy}", file=sys.stderr)
        moved = None
        if isinstance(err, changes.BaselineElsewhere) and err.context is not None and len(err.elsewhere) == 1:
            moved = (*protection.moved(err.context, context, env, err.elsewhere[0], err.target), err.commit)
        return None, first_deploy, moved
