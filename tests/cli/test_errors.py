"""No command ends in a traceback: bad flags, unknown profiles, missing or refused
credentials, unreadable dumps and missing files each give one `error:` line and exit 2."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from cli import main as cli
from cli import preflight
from infra import validation
from tests.conftest import CONTEXT

CASES = [
    (["topology", "--from", "/nonexistent/nodes.json"], "--from /nonexistent/nodes.json: [Errno 2]"),
    (["topology", "--from", "{unreadable}"], "not a node list"),
    (["topology", "--from", "{malformed}"], "--from"),
    (["render-job", "-c", "env=nosuch"], "'nosuch' is not an environment"),
    # A flag's value is refused as the flag, not as the config field it sets.
    (["render-job", "-c", "env=prod", "--nodes", "9", "--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1"],
     "prod: --nodes: 9 is more than instance group 'gpu' can have (4)"),
    (["render-job", "-c", "env=prod", "--team", "nobody", "--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1"],
     "prod: --team: 'nobody' is not a team; teams: ml-research, ml-production"),
    (["team", "nobody", "-c", "env=prod"], "'nobody' is not a team of prod"),
    (["validate", "-c", "env=nosuch"], "'nosuch' is not an environment"),
    (["review", "--assembly", "/nonexistent"], "/nonexistent has no manifest.json"),
    (["review", "--against", "/nonexistent"], "--against /nonexistent"),
    (["preflight", "-c", "env=prod", "--profile", "no-such-profile"], "--profile no-such-profile: no such profile"),
    (["preflight", "-c", "env=prod"], "no AWS credentials from the default credential chain"),
    (["preflight", "-c", "env=prod", "--region", "eu-west-1"], "--region eu-west-1: env prod deploys to us-east-1; drop --region or pass that one"),
    (["upgrade-plan", "--to", "1.35", "-c", "env=prod", "--from-account", "--profile", "no-such-profile"],
     "--profile no-such-profile: no such profile"),
    (["upgrade-plan", "--to", "1.35", "-c", "env=prod", "--from-account"], "no AWS credentials from the default credential chain"),
    (["upgrade-plan", "--to", "1.32", "-c", "env=prod"], "EKS cannot downgrade a control plane"),
    (["upgrade-plan", "--to", "1.x", "-c", "env=dev"], "give a Kubernetes minor version"),
    (["accept", "-c", "env=nosuch"], "'nosuch' is not an environment"),
    (["accept", "-c", "env=prod", "--from", "/nonexistent"], "--from /nonexistent: no nodes.json"),
    (["dashboards", "-c", "env=dev"], "there is no Grafana workspace"),
]


@pytest.mark.parametrize("argv, says", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_each_command_fails_in_one_line_without_a_traceback(argv, says, tmp_path, capsys, monkeypatch):
    # No credentials anywhere: no files, no environment, no instance metadata.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "odd.json").write_text('{"items": [{"status": {}}]}')
    argv = [{"{unreadable}": str(tmp_path / "odd.json"), "{malformed}": str(tmp_path / "bad.json")}.get(a, a) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1 and says in errors[0], err


@pytest.mark.parametrize("argv", [["validate", "--nope"], ["team"], ["team", "x", "--format", "yaml"], ["preflight", "--region"]])
def test_bad_flags_are_argparse_usage_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].startswith("hyperpod-cdk")


@pytest.mark.parametrize("code", ["ExpiredToken", "InvalidClientTokenId"])
def test_refused_credentials_stop_preflight_with_what_to_do(code):
    sts = boto3.client("sts", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(sts)
    stub.add_client_error("get_caller_identity", service_error_code=code, http_status_code=403)
    stub.activate()
    settings = validation.load_settings(CONTEXT, "prod")[0]
    with pytest.raises(preflight.NoCredentials, match=f"AWS refused the credentials of the default credential chain .{code}.: renew them"):
        preflight.run(settings, session=boto3.Session(region_name="us-east-1"), clients={"sts": sts})


# Every command that reads cdk.json or an environment, with what it needs besides.
CONFIG_COMMANDS = [["render-job", "--image", "x"], ["team", "ml-research"], ["validate"], ["review"], ["preflight"], ["accept"],
                   ["dashboards"], ["upgrade-plan", "--to", "1.35"], ["job-record"]]


# The commands that take several environments (cli.fleet): there two names are two environments.
FLEET_COMMANDS = ("validate", "review", "upgrade-plan")
GUESSES = {
    "no-key": (["-c", "prod"], "-c prod: give key=value, as cdk takes it (-c env=NAME)"),  # cdk reads it as no env: dev, silently
    "two-envs": (["-c", "env=prod", "--env", "dev"], "-c env and --env name dev and prod; give one environment"),
    "unknown-key": (["-c", "foo=bar"], "-c foo=bar: unknown context key 'foo'; hyperpod-cdk takes only -c env=NAME"),
    "empty-env": (["-c", "env="], "-c env=: give the environment's name"),
}


@pytest.mark.parametrize("command, given, says", [
    pytest.param(command, given, says, id=f"{name}-{command[0]}")
    for name, (given, says) in GUESSES.items() for command in CONFIG_COMMANDS
    if not (name == "two-envs" and command[0] in FLEET_COMMANDS)
])
def test_a_context_flag_that_would_be_a_guess_is_refused_in_one_line(command, given, says, capsys):
    assert cli.main([*command, *given]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1 and errors[0].startswith(f"error: {says}"), err


def test_two_names_in_a_fleet_command_are_both_run(capsys):
    assert cli.main(["validate", "-c", "env=prod", "--env", "dev"]) == 0
    assert [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()[:2]] == ["ok: prod", "ok: dev"]


@pytest.mark.parametrize("command", CONFIG_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("text, says", [
    ("[]", 'must be a JSON object with a "context" object, not an array'),
    ('{"context": "prod"}', '"context" must be a JSON object of settings, not a string'),
    ('{"context": {"environments": []}}', "environments: missing from cdk.json context"),
], ids=["array", "string-context", "list-environments"])
def test_a_malformed_cdk_json_is_one_line_in_every_command(command, text, says, tmp_path, capsys, monkeypatch):
    (tmp_path / "cdk.json").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert cli.main(command) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1 and says in errors[0], err


def test_a_profile_named_by_the_environment_is_reported_as_the_environment_names_it(tmp_path, capsys, monkeypatch):
    # botocore's ProfileNotFound carries the name it looked for; the user typed AWS_PROFILE, not --profile.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "nope")
    for argv in (["preflight", "-c", "env=prod"], ["upgrade-plan", "--to", "1.35", "-c", "env=prod", "--from-account"]):
        assert cli.main(argv) == 2
        (line,) = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error:")]
        assert line.startswith("error: AWS_PROFILE=nope: no such profile") and "None" not in line


def test_version_and_every_help_says_the_exit_status_the_command_returns(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"hyperpod-cdk {version('hyperpod-cdk')}"
    for command in ("topology", "render-job", "team", "validate", "review", "preflight", "accept", "dashboards", "upgrade-plan"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = capsys.readouterr().out
        assert "2 bad input" in text and "exit 1 on any error" not in text, command
    # validate's own words against what it returns: a config error is exit 2.
    with pytest.raises(SystemExit):
        cli.main(["validate", "--help"])
    assert "exit 2 on any error" in capsys.readouterr().out
    assert cli.main(["validate", "-c", "env=nosuch"]) == 2
