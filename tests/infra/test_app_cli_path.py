"""The path users take: `cdk synth -c env=...` through the pinned CLI."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONTEXT, run_cdk


def test_bad_config_exits_non_zero_with_one_line_per_problem_and_no_traceback(tmp_path):
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path), "-c", "env=staging")
    assert result.returncode != 0
    assert "error: env: 'staging' is not an environment in cdk.json; valid: dev, prod" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout




@pytest.mark.parametrize("command", [("synth", "--quiet"), ("deploy", "--all", "--require-approval", "never")])
def test_a_context_argument_naming_an_environment_without_env_stops_before_anything_is_built(tmp_path, command):
    # The pinned CLI passes nothing of `-c prod` to the app (it warns "Context argument is not an assignment (key=value):
    # prod"), so the app would build dev; it reads what the CLI was told and stops with one line, before jsii starts.
    result = run_cdk(*command, "-o", str(tmp_path / "out"), "-c", "prod")
    # What the CDK CLI itself does: a warning, on stderr, or on stdout where CI=true (the CLI's --ci logging).
    assert "Context argument is not an assignment (key=value): prod" in result.stderr + result.stdout
    assert result.returncode != 0
    assert ("error: -c prod: 'prod' is an environment, but the CDK CLI passes no context for an argument without '=', so "
            "this would build the default environment; write -c env=prod (environments: dev, prod)") in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists() and "Traceback" not in result.stderr


def test_a_key_written_twice_in_cdk_json_is_refused_by_cdk_synth_and_validate_with_both_lines(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT, cdk_project

    project = cdk_project(CONTEXT, tmp_path / "project")
    text = json.dumps(json.loads((project / "cdk.json").read_text()), indent=1)
    # The region written twice in defaults: Python and the CDK CLI keep the last, silently.
    text = text.replace('"defaults": {', '"defaults": {\n  "region": "us-west-2",', 1)
    (project / "cdk.json").write_text(text)
    first = next(i for i, l in enumerate(text.splitlines(), 1) if '"region": "us-west-2"' in l)
    second = next(i for i, l in enumerate(text.splitlines(), 1) if '"region": "us-east-1"' in l)
    line = (f'"region" is written twice in context.defaults, at line {first} and line {second}: JSON leaves which one counts '
            "to the reader (RFC 8259; the CDK CLI takes the last), so neither is taken; remove one")
    synthesized = run_cdk("synth", "--quiet", "-c", "env=dev", cwd=project)
    assert synthesized.returncode != 0 and f"error: cdk.json: {line}" in synthesized.stderr
    validated = subprocess.run([sys.executable, "-m", "cli.main", "validate", "-c", "env=dev"], cwd=project,
                               capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert validated.returncode == 2 and f"error: {project / 'cdk.json'}: {line}" in validated.stderr


# Flags set to something other than the pinned CLI's recommendation, each with its reason
# (the README lists them too).
FLAGS_NOT_AS_RECOMMENDED = {
    # Recommended "weak" (Fn::GetStackOutput). Our optional-stack contract and the teardown
    # tests are built on exports; the move is a migration of its own ("both", then "weak").
    "@aws-cdk/core:defaultCrossStackReferences": "strong",
}


def test_cdk_json_sets_every_flag_the_pinned_cdk_recommends():
    from tests.conftest import ROOT

    recommended = json.loads((ROOT / "node_modules/aws-cdk/lib/init-templates/.recommended-feature-flags.json").read_text())
    ours = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
    for flag, value in recommended.items():
        assert ours.get(flag) == FLAGS_NOT_AS_RECOMMENDED.get(flag, value), flag


def test_every_log_group_is_encrypted_with_our_key_and_kept_for_our_retention(synth):
    for env in ("dev", "prod"):
        s = synth(env)
        for stack, template in s.templates.items():
            for lid, res in template["Resources"].items():
                if res["Type"] == "AWS::Logs::LogGroup":
                    # CDK's own Lambdas' groups too (useCdkManagedLogGroup)
                    assert "KmsKeyId" in res["Properties"], (env, stack, lid)
                    assert res["Properties"]["RetentionInDays"] == s.settings.protection.log_retention_days, (env, stack, lid)
                    # The kubectl provider's groups go with the EKS cluster, which is never retained
                    # (README: teardown must finish); every other group follows the data policy.
                    kept = s.settings.protection.retain_data and not lid.startswith("ClusterKubectlProvider")
                    assert res["DeletionPolicy"] == ("Retain" if kept else "Delete"), (env, stack, lid)


def test_without_a_readable_process_table_no_environment_is_guessed(tmp_path, monkeypatch):
    # macOS (and Finch's host) has no /proc: the CLI's arguments cannot be read, so a run without `env` could be
    # `cdk deploy --all -c prod` and is refused in one line; with `env`, nothing needs reading.
    import app

    monkeypatch.setattr(app, "PROC", str(tmp_path / "no-proc"))
    assert app._cdk_cli_arguments() is None
    assert app._what_the_cli_was_told({"environments": {"dev": {}, "prod": {}}}) == (
        "env: no environment given, and the CDK CLI's arguments cannot be read on this system to tell that none was meant; "
        "write -c env=NAME (environments: dev, prod)")
    assert app._what_the_cli_was_told({"env": "prod", "environments": {"dev": {}, "prod": {}}}) is None
    # Readable and no stray context (no CDK CLI among the parents, or one with none): the default environment is built.
    monkeypatch.setattr(app, "_cdk_cli_arguments", lambda: ["synth", "--quiet"])
    assert app._what_the_cli_was_told({"environments": {"dev": {}, "prod": {}}}) is None
    monkeypatch.setattr(app, "_cdk_cli_arguments", lambda: ["deploy", "--all", "-c", "prod"])
    assert "-c prod: 'prod' is an environment" in app._what_the_cli_was_told({"environments": {"dev": {}, "prod": {}}})
