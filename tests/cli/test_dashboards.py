"""`hyperpod-cdk dashboards`: the import command it prints calls only AWS operations and flags
that exist (botocore's Grafana and AMP models), names the workspaces the add-on creates, and
imports each of the quick setup's dashboards from one pinned commit."""

from __future__ import annotations

import re
import shlex

import botocore.session
import pytest

from cli import dashboards
from cli import main as cli
from infra import validation
from tests.conftest import patched_context

GRAFANA_ON = {"addons": {"observability": {"grafana": {"enabled": True}}}}


@pytest.fixture(scope="module")
def script() -> str:
    settings, _ = validation.load_settings(patched_context("prod", GRAFANA_ON), "prod")
    return dashboards.command(settings)


def _aws_calls(script: str) -> list[tuple[str, str, dict]]:
    calls = []
    for match in re.finditer(r"aws (\S+) (\S+)((?: --[a-z-]+(?: (?:\"[^\"]*\"|'[^']*'|[^ )-][^ )]*))?)*)", script):
        words = shlex.split(match.group(3).replace("$(", "").replace(")", ""))
        flags = {w[2:]: None for w in words if w.startswith("--")}
        calls.append((match.group(1), match.group(2), flags))
    return calls


def test_every_aws_call_is_an_operation_with_those_parameters_in_botocores_models(script):
    session = botocore.session.get_session()
    calls = _aws_calls(script)
    assert {(svc, op) for svc, op, _ in calls} == {
        ("grafana", "list-workspaces"), ("amp", "list-workspaces"), ("grafana", "list-workspace-service-accounts"),
        ("grafana", "create-workspace-service-account"), ("grafana", "create-workspace-service-account-token")}
    global_flags = {"region", "query", "output"}
    for service, operation, flags in calls:
        model = session.get_service_model(service)
        name = "".join(part.capitalize() for part in operation.split("-"))
        members = {re.sub(r"(?<!^)(?=[A-Z])", "-", m).lower() for m in model.operation_model(name).input_shape.members}
        assert set(flags) - global_flags <= members, (service, operation)


def test_the_token_lives_minutes_within_what_grafana_allows():
    model = botocore.session.get_session().get_service_model("grafana")
    rule = model.operation_model("CreateWorkspaceServiceAccountToken").input_shape.members["secondsToLive"].metadata
    assert rule["min"] <= dashboards.TOKEN_SECONDS <= 3600 < rule["max"]


def test_the_workspaces_are_found_by_the_names_the_observability_addon_gives_them(script):
    # addons/observability.py names both `<prefix>-<env>-hyperpod` (the Prometheus alias, the Grafana name).
    assert "workspaces[?name=='hyperpod-prod-hyperpod']" in script and "--alias hyperpod-prod-hyperpod" in script


def test_each_dashboard_is_imported_once_under_its_uid_from_the_pinned_commit(script):
    for name, uid in dashboards.DASHBOARDS.items():
        (line,) = [l for l in script.splitlines() if f"templates/{name}.json" in l]
        assert f"/{dashboards.SOURCE_COMMIT}/" in line and f'uid: "{uid}"' in line and line.endswith("post dashboards/db")
    # The Prometheus data source the dashboards' `datasource` variable picks comes first, as the default.
    assert script.index("post datasources") < script.index("post dashboards/db") and "isDefault:true" in script


def test_without_grafana_there_is_nothing_to_import(capsys):
    assert cli.main(["dashboards", "-c", "env=dev"]) == 2
    assert "addons.observability.grafana.enabled is off in dev" in capsys.readouterr().err
