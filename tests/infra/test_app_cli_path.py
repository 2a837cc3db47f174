"""The path users take: `cdk synth -c env=...` through the pinned CLI."""

from __future__ import annotations

import json

import pytest

from infra import chart
from tests.conftest import CONTEXT, run_cdk


def test_cdk_synth_of_the_default_environment_needs_no_aws_lookups(tmp_path, synth):
    # A fresh clone: no prepared chart, no credentials, every stack bundled.
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "missing" not in manifest  # no context lookups, so no credentials were needed
    stacks = sorted(a for a, v in manifest["artifacts"].items() if v["type"] == "aws:cloudformation:stack")
    assert stacks == sorted(f"hyperpod-dev-{suffix}" for suffix in synth("dev").templates)
    assert "end-of-life" not in result.stderr  # jsii runs on the venv's Node 24
    # What cdk deploy --all synthesizes: it works offline, and says deploy will stop, and why.
    if not chart.is_prepared(CONTEXT["defaults"]["hyperpod"]["helm_chart"]["revision"]):
        assert "deploy will stop: the HyperPod dependencies chart" in result.stderr
        assert "run `make hyperpod-chart ENV=dev`" in result.stderr
        for name in stacks:
            assert "HyperPodChartPrepared" in json.loads((tmp_path / f"{name}.template.json").read_text())["Rules"]


def test_bad_config_exits_non_zero_with_one_line_per_problem_and_no_traceback(tmp_path):
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path), "-c", "env=staging")
    assert result.returncode != 0
    assert "error: env: 'staging' is not an environment in cdk.json; valid: dev, prod" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


