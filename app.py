#!/usr/bin/env python3
"""Composes the stacks of one environment (`cdk synth -c env=NAME`, default dev) under the App,
and the delivery stack where that environment holds the delivery block."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from addons import registry
from infra.config import ConfigError, Settings, context_from_cdk_cli, read_cdk_json

if TYPE_CHECKING:
    import aws_cdk as cdk


def compose(app: cdk.App, settings: Settings, pipeline: tuple[tuple[Settings, ...], ...] = ()) -> list[cdk.Stack]:
    """Build every stack of `settings` into `app`, in deploy order (stacks/environment.py), and
    where `settings` holds the delivery block, the delivery stack, whose Stages compose each
    environment of `pipeline` (registry.pipeline: its settings, wave by wave) the same way."""
    from stacks import environment

    stacks: list[cdk.Stack] = environment.compose(app, settings)
    if settings.delivery is not None:
        from stacks.delivery import DeliveryStack

        delivery = DeliveryStack(app, settings=settings, waves=pipeline)
        # CodePipeline's support stack per other region (its replication bucket) is deployed with it.
        stacks += [delivery, *delivery.support_stacks]
    return stacks


def annotate(stack: cdk.Stack, warnings: list[str]) -> None:
    """Config warnings as CDK warnings on the first stack: the CLI shows each once, and
    `Annotations.of(...).acknowledge_warning(id)` can silence one by its id."""
    import aws_cdk as cdk

    for line in warnings:
        field = line.split(": ", 2)[1] if line.count(": ") >= 2 else "config"
        cdk.Annotations.of(stack).add_warning_v2(f"hyperpod-cdk:{field}", line)


def _refuse(problems: list[str], warnings: list[str] = ()) -> int:
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    print(f"{len(problems)} problem(s); nothing was synthesized", file=sys.stderr)
    return 2


# Where the process table is read (Linux's procfs); a test points it elsewhere, as macOS has none.
PROC = "/proc"


def _cdk_cli_arguments() -> list[str] | None:
    """The arguments the CDK CLI was started with, from the process that started this app (its
    shell's parent), [] where no CDK CLI started it, or None where the process table cannot be read
    (no /proc: macOS, Finch's host, Windows): there nothing tells `-c prod` from no context at all."""
    from pathlib import Path

    pid = os.getppid()
    for _ in range(4):
        try:
            argv = [a.decode(errors="replace") for a in Path(f"{PROC}/{pid}/cmdline").read_bytes().split(b"\0") if a]
            parent = int(Path(f"{PROC}/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if any(os.path.basename(a) == "cdk" for a in argv[:2]):
            return argv[[os.path.basename(a) for a in argv].index("cdk") + 1:]
        if parent <= 1:
            return []
        pid = parent
    return []


def _what_the_cli_was_told(context: dict) -> str | None:
    """Why this run must not go on, or None. The CDK CLI passes the app no context for an argument
    without '=' (`cdk synth -c prod` only warns "Context argument is not an assignment (key=value):
    prod"), so without `env` the app would build the default environment: a deploy of dev meant as
    prod. Where the CLI's arguments cannot be read, no environment is guessed: `env` must be given. And it reads cdk.json itself, keeping the last of a key written twice: the file is read
    here as `hyperpod-cdk validate` reads it, refusing that."""
    from pathlib import Path

    if Path("cdk.json").is_file():  # the CDK CLI runs the app where cdk.json is
        try:
            read_cdk_json(Path("cdk.json").read_text())
        except ValueError:
            pass  # no JSON at all: the CDK CLI said so before it started the app
    if "env" in context:
        return None
    args = _cdk_cli_arguments()
    if args is None:
        envs = ", ".join(sorted(context.get("environments") or {}))
        return (f"env: no environment given, and the CDK CLI's arguments cannot be read on this system to tell that none was "
                f"meant; write -c env=NAME (environments: {envs})")
    given = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "--context")]
    given += [a.split("=", 1)[1] for a in args if a.startswith("--context=")]
    for item in given:
        if "=" not in item:
            envs = ", ".join(sorted(context.get("environments") or {}))
            named = f"{item!r} is an environment" if item in (context.get("environments") or {}) else "it is no key=value"
            return (f"-c {item}: {named}, but the CDK CLI passes no context for an argument without '=', so this would build "
                    f"the default environment; write -c env={item if named.endswith('environment') else 'NAME'} "
                    f"(environments: {envs})")
    return None


def main(context: dict | None = None) -> int:
    """`context` stands in for what the CDK CLI passes (tests run many configs in one process).

    The config is read and checked first, from the same JSON `hyperpod-cdk validate` reads
    (the CLI's CDK_CONTEXT_JSON, nulls and all), before anything starts jsii: a refusal
    takes well under two seconds and creates nothing."""
    raw = context if context is not None else context_from_cdk_cli(os.environ)
    if context is None:
        try:
            unsaid = _what_the_cli_was_told(raw)
        except ConfigError as err:
            return _refuse(err.problems)
        if unsaid:
            return _refuse([unsaid])
    try:
        settings, warnings, waves = registry.load(raw, raw.get("env"))
    except ConfigError as err:
        return _refuse(err.problems, err.warnings)
    from infra.node import use_venv_node

    use_venv_node()  # jsii on the venv's Node 24, however the app was started
    import aws_cdk as cdk

    from infra import compliance

    app = cdk.App(context=context) if context is not None else cdk.App()
    try:
        stacks = compose(app, settings, waves)
    except ConfigError as err:  # found while composing
        return _refuse(err.problems, warnings)
    annotate(stacks[0], warnings)
    compliance.apply(app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
