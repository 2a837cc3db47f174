"""`hyperpod-cdk job-record`: the sample job's give-ups and non-finite windows, read from beside its
checkpoints after the job and its log are gone, in the words train.py's next start uses. The
records train.py itself writes: tests/training/test_nonfinite.py gives up for real and reads them
back through this command."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from cli import main as cli
from infra import validation
from manifests import job as job_manifest
from tests.conftest import CONTEXT

WINDOW = {"steps": [5, 7], "update": 4, "world": 2, "resume_from": 3, "documents": [[0, 1, 2], [0, 1, 3]]}
GAVE_UP = {"at": "2026-12-07T12:00:00+00:00", "step": 3, "world": 2, "limit": 1, "exit": 0, "windows": [WINDOW, WINDOW]}


@pytest.fixture
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield


def test_a_give_up_in_the_jobs_s3_prefix_is_said_with_its_time_checkpoint_and_windows_and_exits_1(aws, capsys):
    settings, _ = validation.load_settings(CONTEXT, "prod")
    uri = job_manifest.checkpoint_uri(settings)  # where the rendered job's --checkpoint-dir points
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    s3 = boto3.client("s3", region_name=settings.region)
    s3.create_bucket(Bucket=bucket, **({"CreateBucketConfiguration": {"LocationConstraint": settings.region}}
                                       if settings.region != "us-east-1" else {}))
    s3.put_object(Bucket=bucket, Key=f"{prefix}/_GAVE_UP.json", Body=json.dumps({"gave_up": [GAVE_UP]}))
    s3.put_object(Bucket=bucket, Key=f"{prefix}/_NONFINITE.json", Body=json.dumps({"windows": [WINDOW, WINDOW]}))
    assert cli.main(["job-record", "-c", "env=prod"]) == 1
    out = capsys.readouterr().out.splitlines()
    words = "the 2 documents of steps 4-7 (step 4's update, then the non-finite steps) on 2 ranks"
    assert out == [
        f"checkpoints: {uri}",
        f"gave up at 2026-12-07T12:00:00+00:00, last checkpoint step=3, on 2 ranks, exit 0: 2 non-finite windows, at most 1 "
        f"({words}; {words}); no start has run since",
        f"passed over on every start: {words}, stopped on with checkpoint step=3",
        f"passed over on every start: {words}, stopped on with checkpoint step=3",
    ]
    assert cli.main(["job-record", "-c", "env=prod", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["gave_up"] == [GAVE_UP]


def test_a_job_that_never_gave_up_says_so_and_exits_0(aws, capsys):
    settings, _ = validation.load_settings(CONTEXT, "prod")
    bucket = job_manifest.checkpoint_uri(settings)[len("s3://"):].split("/")[0]
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
    assert cli.main(["job-record", "-c", "env=prod", "--region", "us-east-1"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["no give-up recorded", "no non-finite window recorded"]


def test_a_folder_not_on_this_machine_or_a_foreign_file_is_one_line(tmp_path, capsys):
    assert cli.main(["job-record", "--checkpoint-dir", str(tmp_path / "fsx")]) == 2
    (line,) = capsys.readouterr().err.splitlines()[1:]  # after the config: line
    assert line.startswith(f"error: {tmp_path / 'fsx'} is not a folder on this machine (the FSx checkpoints are mounted")
    (tmp_path / "_GAVE_UP.json").write_text("[]")
    assert cli.main(["job-record", "--checkpoint-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"error: {tmp_path}/_GAVE_UP.json is not a record train.py writes (a JSON object with 'gave_up')"]
