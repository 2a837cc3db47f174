"""The path users take: `cdk synth -c env=...` through the pinned CLI."""

from __future__ import annotations

import json

import pytest

from infra import chart
from tests.conftest import CONTEXT, run_cdk


def test_cdk_synth_of_the_default_environment_needs_no_aws_lookups(tmp_path, synth):
    # As make synth does without a prepared chart: every template, bundling only the network.
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path), "--exclusively", "*-network")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "missing" not in manifest  # no context lookups, so no credentials were needed
    stacks = sorted(a for a, v in manifest["artifacts"].items() if v["type"] == "aws:cloudformation:stack")
    assert stacks == sorted(f"hyperpod-dev-{suffix}" for suffix in synth("dev").templates)
    assert "end-of-life" not in result.stderr  # jsii runs on the venv's Node 24


def test_bad_config_exits_non_zero_with_one_line_per_problem_and_no_traceback(tmp_path):
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path), "-c", "env=staging")
    assert result.returncode != 0
    assert "error: env: 'staging' is not an environment in cdk.json; valid: dev, prod" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_synth_that_bundles_the_chart_stops_early_without_the_prepared_chart(tmp_path):
    if chart.is_prepared(CONTEXT["defaults"]["hyperpod"]["helm_chart"]["revision"]):
        pytest.skip("the chart is prepared on this machine")
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path))  # what cdk deploy --all synthesizes
    assert result.returncode != 0
    assert "run `make hyperpod-chart ENV=dev`" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.template.json"))  # nothing written, nothing deployable
