"""Shared fixtures: each environment is synthesized once per test session, in-process.

`synth(env)` builds the app exactly as app.py does (compose + both nag packs) into a
session temp folder and returns the templates; variants of an environment (a patched
config) are synthesized once per distinct patch.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]

from infra import config  # noqa: E402

ENVIRONMENTS = config.environment_names(CONTEXT)


def patched_context(env: str, patch: dict) -> dict:
    """cdk.json context with `patch` deep-merged into environment `env`."""
    ctx = json.loads(json.dumps(CONTEXT))
    ctx["environments"][env] = config.deep_merge(ctx["environments"][env], patch)
    return ctx


@dataclass
class Synth:
    settings: config.Settings
    outdir: Path
    templates: dict  # stack suffix -> template dict

    def template(self, suffix: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.templates[suffix])

    def resources(self, suffix: str, type_: str) -> dict:
        return {k: r for k, r in self.templates[suffix]["Resources"].items() if r["Type"] == type_}

    def exported(self, name: str) -> tuple[str, object]:
        """(stack suffix, value) of the output exported as `name`: where an import leads."""
        for suffix, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == name:
                    return suffix, output["Value"]
        raise KeyError(f"no stack exports {name}")

    @property
    def report(self) -> dict:
        return json.loads((self.outdir / "validation-report.json").read_text())


def _synthesize(context: dict, env: str, outdir: Path) -> Synth:
    from cli.synth import synthesize

    settings, stacks = synthesize(context, env, outdir)
    prefix = f"{settings.prefix}-{env}-"
    templates = {
        s.stack_name[len(prefix):]: json.loads((outdir / f"{s.artifact_id}.template.json").read_text()) for s in stacks
    }
    return Synth(settings, outdir, templates)


_CACHE: dict[str, Synth] = {}


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    def get(env: str, patch: dict | None = None) -> Synth:
        key = json.dumps([env, patch], sort_keys=True)
        if key not in _CACHE:
            ctx = patched_context(env, patch) if patch else CONTEXT
            _CACHE[key] = _synthesize(ctx, env, tmp_path_factory.mktemp(f"cdk-{env}"))
        return _CACHE[key]

    return get


def run_cdk(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """The real CLI path users take: node_modules' cdk on the venv's Node, app.py via cdk.json."""
    from cli.synth import cdk_cli

    command, env = cdk_cli()  # as the Makefile runs it, whatever ran before in this session
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
