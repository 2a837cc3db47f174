"""Whether the credentials outlast the deploy: their expiry against the deploy plan's minutes.

`cdk deploy --all` watches each stack with the credentials it started with. When they expire,
CloudFormation finishes the stack it is on, but the CLI stops watching and never starts the
stacks after it (aws/aws-cdk issues 19359 and 4565). prod's first deploy takes about 135
minutes, and a role-chained session lasts one hour at most (IAM user guide, role chaining).

botocore keeps the expiry private (`RefreshableCredentials._expiry_time`, as the AWS CLI's
`configure export-credentials` reads it): assumed roles, IAM Identity Center (SSO) and
environment credentials given with AWS_CREDENTIAL_EXPIRATION carry one; long-term keys and a
session token without its expiry carry none.

The minutes come from the review (cli.deploy_plan, as `hyperpod-cdk review` and `make synth`
write them into review-<env>.json): this change's, where the review compared against a
baseline and was made of the config as it is now; else the whole deploy's, synthesized offline
as the review does, and said so.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cli.preflight.base import Result

# Credentials the platform hands out again as they expire (botocore's provider METHODs): the
# instance's role and the container's (ECS, CodeBuild), fetched anew from their endpoint.
RENEWED_BY_PLATFORM = {"iam-role": "the instance's role", "container-role": "the container's role"}

WAYS_OUT = (
    "a longer session: `aws sts assume-role --duration-seconds` up to the role's MaxSessionDuration (12 hours at most), "
    "from long-term credentials, not from another role's session (IAM caps role chaining at 1 hour); or a longer session "
    "duration on the IAM Identity Center permission set (12 hours at most); or the pipeline (docs/delivery.md), which "
    "deploys under its own roles"
)


@dataclass(frozen=True)
class DeployTime:
    minutes: float
    scope: str  # what the minutes are of: "this change against main (...)", "the whole deploy (...)"
    # Whose credentials the deploy runs with: this session's (`cdk deploy`), or the delivery
    # pipeline's roles (its CloudFormation actions), where preflight is one of its steps.
    by_pipeline: bool = False


def _review_time(out_root: Path, context: dict, env: str) -> DeployTime | str:
    """The minutes the last review of this config wrote (cli.fleet.last_review), or why there are none."""
    from cli.fleet import last_review

    report = last_review(out_root, context, env)
    if isinstance(report, str):
        return report
    shown = f"review-{env}.json"
    update = (report.get("changes") or {}).get("update_plan")
    if update is not None:
        return DeployTime(update["minutes"], f"this change against {report['changes']['against']} ({shown})")
    return DeployTime(report["deploy_plan"]["minutes"], f"the whole deploy ({shown} compared with no baseline)")


def deploy_time(out_root: Path, context: dict, env: str, synthesize=None, pipeline: bool = False) -> DeployTime | str:
    """This change's minutes from the last review of this config (cdk.out/review-<env>.json),
    else the whole deploy's from an offline synthesis (`synthesize(context, env, outdir)`,
    default cli.synth's); a line saying why there are none where synth refuses the config.
    `pipeline`: a step of the delivery pipeline, whose review step hands it the review of the
    assembly the stage deploys: read that, never a synthesis of its own."""
    import tempfile
    from dataclasses import replace

    from cli.review import deploy_plan
    from cli.review.assembly import load_stacks
    from cli.synth import SynthRefused

    found = _review_time(out_root, context, env)
    if isinstance(found, DeployTime):
        return replace(found, by_pipeline=pipeline)
    if pipeline:
        return f"the pipeline's review step handed no review of this config ({found})"
    if synthesize is None:
        from cli.synth import synthesize
    print(f"synthesizing {env} offline for its deploy plan ({found}) ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix=f"preflight-{env}-") as tmp:
        try:
            synthesize(context, env, Path(tmp))
        except SynthRefused as err:
            return f"cdk synth refuses {env} ({err.problems[0]}), so it has no deploy plan"
        total, _ = deploy_plan.plan(load_stacks(Path(tmp)))
    return DeployTime(round(total), f"the whole deploy: {found}; `hyperpod-cdk review -c env={env}` gives this change's")


def check_session(credentials, deploy: DeployTime | str, now: datetime | None = None) -> Result:
    """One line: do these botocore credentials last the deploy's minutes?"""
    if isinstance(deploy, str):
        return Result("session", "warn", f"the credentials' time is not weighed: {deploy}", "fix what synth refuses first")
    if credentials is None:
        return Result("session", "warn", "no credentials to read an expiry from")
    method = getattr(credentials, "method", None) or "unknown source"
    plan = f"{deploy.scope}: about {deploy.minutes:.0f} min"
    expiry = getattr(credentials, "_expiry_time", None)
    if expiry is None and getattr(credentials, "refresh_needed", None) is not None:
        credentials.get_frozen_credentials()  # an assumed role is fetched on first use
        expiry = credentials._expiry_time
    if deploy.by_pipeline:
        # CodePipeline's CloudFormation actions deploy under the pipeline's roles; this session only reads.
        until = f"expires at {expiry.astimezone(timezone.utc).strftime('%H:%M UTC')}" if expiry else "has no expiry to read"
        return Result("session", "pass", f"the pipeline deploys under its own roles; this session ({method}) {until} "
                      f"and only reads; {plan}")
    if expiry is None:
        if not credentials.get_frozen_credentials().token:
            return Result("session", "pass", f"long-term keys ({method}): no expiry; {plan}")
        return Result(
            "session", "warn",
            f"session credentials ({method}) with no expiry to read; {plan}",
            "give their expiry (`aws configure export-credentials --format env` sets AWS_CREDENTIAL_EXPIRATION), or make "
            f"sure the session lasts {deploy.minutes:.0f} min: " + WAYS_OUT,
        )
    now = now or datetime.now(timezone.utc)
    left = (expiry - now).total_seconds() / 60
    at = expiry.astimezone(timezone.utc).strftime("%H:%M UTC")
    if method in RENEWED_BY_PLATFORM:
        return Result("session", "pass", f"{RENEWED_BY_PLATFORM[method]} ({method}), renewed as it expires (next at {at}); {plan}")
    if left < deploy.minutes:
        return Result(
            "session", "warn",
            f"credentials ({method}) expire at {at}, in {max(left, 0):.0f} min; {plan}: cdk deploy --all stops watching "
            "when they expire and never starts the stacks after the one in progress",
            f"a session of at least {deploy.minutes:.0f} min: " + WAYS_OUT,
        )
    return Result("session", "pass", f"credentials ({method}) expire at {at}, in {left:.0f} min; {plan}")
