"""preflight weighs the credentials' expiry against the deploy plan's minutes, before the deploy.

The credentials are botocore's own objects (RefreshableCredentials for assumed roles and SSO,
Credentials for keys), read as botocore keeps them; the limit it warns of is IAM's role chaining
cap of one hour (IAM user guide, "Role chaining") and `cdk deploy --all` losing its session
(aws/aws-cdk issues 19359, 4565)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone

import boto3
import botocore.session
import pytest
from botocore.credentials import CredentialProvider, Credentials, RefreshableCredentials
from moto import mock_aws

from cli import preflight
from cli.review import config_diff
from infra import validation
from tests.conftest import CONTEXT

PROD_PLAN = preflight.DeployTime(135, "the whole deploy (review-prod.json compared with no baseline)")


def _assumed_role(expires_in: timedelta, method: str = "assume-role") -> RefreshableCredentials:
    expiry = datetime.now(timezone.utc) + expires_in
    return RefreshableCredentials.create_from_metadata(
        {"access_key": "ASIAEXAMPLE", "secret_key": "secret", "token": "session-token", "expiry_time": expiry.isoformat()},
        refresh_using=lambda: pytest.fail("no refresh while the credentials are valid"),
        method=method,
    )


def test_an_assumed_role_that_ends_before_the_deploy_warns_with_the_ways_out():
    result = preflight.check_session(_assumed_role(timedelta(minutes=30)), PROD_PLAN)
    assert result.status == "warn"
    assert "credentials (assume-role) expire at" in result.detail and "in 30 min" in result.detail
    assert "about 135 min" in result.detail and "never starts the stacks after" in result.detail
    # The ways out: a longer session (not through role chaining), SSO's session duration, the pipeline.
    for way in ("--duration-seconds", "MaxSessionDuration", "role chaining at 1 hour", "permission set", "docs/delivery.md"):
        assert way in result.action, way


def test_credentials_that_outlast_the_deploy_pass_and_say_both_figures():
    result = preflight.check_session(_assumed_role(timedelta(hours=4), method="sso"), PROD_PLAN)
    assert result.status == "pass" and "credentials (sso) expire at" in result.detail and "about 135 min" in result.detail


def test_static_credentials_say_there_is_no_expiry_to_read():
    session_token = Credentials("ASIAEXAMPLE", "secret", "token", method="env")
    result = preflight.check_session(session_token, PROD_PLAN)
    assert result.status == "warn" and "no expiry to read" in result.detail
    assert "AWS_CREDENTIAL_EXPIRATION" in result.action
    keys = Credentials("AKIAEXAMPLE", "secret", method="shared-credentials-file")
    assert preflight.check_session(keys, PROD_PLAN).status == "pass"
    assert "long-term keys (shared-credentials-file): no expiry" in preflight.check_session(keys, PROD_PLAN).detail


def test_the_instance_or_containers_role_is_renewed_by_the_platform():
    result = preflight.check_session(_assumed_role(timedelta(minutes=20), method="container-role"), PROD_PLAN)
    assert result.status == "pass" and "renewed as it expires" in result.detail


class _Provider(CredentialProvider):
    """A link of botocore's own credential chain that hands out the given credentials."""

    METHOD = "assume-role"

    def __init__(self, credentials):
        super().__init__()
        self.credentials = credentials

    def load(self):
        return self.credentials


def test_preflight_reads_the_expiry_of_the_sessions_credentials_after_the_account_check(monkeypatch):
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "111111111111")
    monkeypatch.setattr(preflight, "CHECKS", (preflight.check_account, preflight.check_zones))  # moto serves these two
    core = botocore.session.Session()
    core.get_component("credential_provider").insert_before("env", _Provider(_assumed_role(timedelta(minutes=30))))
    settings = validation.load_settings(CONTEXT, "prod")[0]
    asked = []
    with mock_aws():
        results = preflight.run(settings, session=boto3.Session(botocore_session=core, region_name="us-east-1"),
                                deploy=lambda: asked.append(1) or PROD_PLAN)
    checks = [r.check for r in results]
    assert asked == [1] and checks.index("session") == checks.index("account") + 1
    (session,) = [r for r in results if r.check == "session"]
    assert session.status == "warn" and "in 30 min" in session.detail


def _review(path, context, env, **fields):
    report = {"env": env, "config_fingerprint": config_diff.fingerprint(context, env), "deploy_plan": {"minutes": 135},
              "changes": None, **fields}
    path.write_text(json.dumps(report))


def test_this_changes_minutes_come_from_the_review_of_the_same_config(tmp_path):
    _review(tmp_path / "review-prod.json", CONTEXT, "prod",
            changes={"against": "main (0123456789ab)", "update_plan": {"minutes": 12, "waits": [], "critical_path": []}})
    got = preflight.deploy_time(tmp_path, CONTEXT, "prod", synthesize=lambda *a: pytest.fail("a fresh review needs no synth"))
    assert got == preflight.DeployTime(12, "this change against main (0123456789ab) (review-prod.json)")
    # A review with no baseline: the whole deploy, said so.
    _review(tmp_path / "review-prod.json", CONTEXT, "prod")
    whole = preflight.deploy_time(tmp_path, CONTEXT, "prod", synthesize=lambda *a: pytest.fail("a fresh review needs no synth"))
    assert whole == preflight.DeployTime(135, "the whole deploy (review-prod.json compared with no baseline)")


def test_without_a_review_of_this_config_the_whole_deploy_is_planned_from_a_synthesis(synth, tmp_path):
    prod = synth("prod")
    # A review made of another config (prod's block emptied since): not this deploy's minutes.
    _review(tmp_path / "review-prod.json", {**CONTEXT, "environments": {**CONTEXT["environments"], "prod": {}}}, "prod")

    def synthesize(context, env, outdir):  # the session's prod synthesis, made by cli.synth as preflight's would be
        assert (context, env) == (CONTEXT, "prod")
        shutil.copytree(prod.outdir, outdir, dirs_exist_ok=True)

    got = preflight.deploy_time(tmp_path, CONTEXT, "prod", synthesize=synthesize)
    assert "review-prod.json is a review of another config" in got.scope and got.scope.startswith("the whole deploy")
    # prod's first deploy: about 135 minutes, most of it the p5 nodes' deep health checks (docs/deploying.md).
    assert 120 <= got.minutes <= 150, got
    # Against that plan, an assumed role's 30 minutes warn, and 4 hours pass.
    assert preflight.check_session(_assumed_role(timedelta(minutes=30)), got).status == "warn"
    assert preflight.check_session(_assumed_role(timedelta(hours=4)), got).status == "pass"
