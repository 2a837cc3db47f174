"""The path users take: `cdk synth -c env=...` through the pinned CLI."""

from __future__ import annotations

import json

from tests.conftest import run_cdk


def test_cdk_synth_of_the_default_environment_needs_no_aws_lookups(tmp_path):
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "missing" not in manifest  # no context lookups, so no credentials were needed
    stacks = sorted(a for a, v in manifest["artifacts"].items() if v["type"] == "aws:cloudformation:stack")
    assert stacks == ["hyperpod-dev-cluster", "hyperpod-dev-network"]
    assert "end-of-life" not in result.stderr  # jsii runs on the venv's Node 24


def test_bad_config_exits_non_zero_with_one_line_per_problem_and_no_traceback(tmp_path):
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path), "-c", "env=staging")
    assert result.returncode != 0
    assert "error: env: 'staging' is not an environment in cdk.json; valid: dev, prod" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
