#!/usr/bin/env python3
"""Composes the stacks of one environment (`cdk synth -c env=NAME`, default dev) under the App,
and the delivery stack where that environment holds the delivery block."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from addons import registry
from infra.config import ConfigError, Settings, context_from_cdk_cli

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


def main(context: dict | None = None) -> int:
    """`context` stands in for what the CDK CLI passes (tests run many configs in one process).

    The config is read and checked first, from the same JSON `hyperpod-cdk validate` reads
    (the CLI's CDK_CONTEXT_JSON, nulls and all), before anything starts jsii: a refusal
    takes well under two seconds and creates nothing."""
    raw = context if context is not None else context_from_cdk_cli(os.environ)
    try:
        settings, warnings = registry.load(raw, raw.get("env"))
    except ConfigError as err:
        return _refuse(err.problems, err.warnings)
    from infra.node import use_venv_node

    use_venv_node()  # jsii on the venv's Node 24, however the app was started
    import aws_cdk as cdk

    from infra import compliance

    app = cdk.App(context=context) if context is not None else cdk.App()
    try:
        stacks = compose(app, settings, registry.pipeline(raw, settings))
    except ConfigError as err:  # found while composing
        return _refuse(err.problems, warnings)
    annotate(stacks[0], warnings)
    compliance.apply(app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
