"""`hyperpod-cdk job-record`: what the sample job left beside its checkpoints, after the job and
its log are gone. A give-up ends the job as Completed (exit 0, the one exit the operator does
not retry) and `ttlSecondsAfterFinished` deletes the job and its pods' logs later; train.py keeps
each give-up (when, from which checkpoint, on how many ranks, which windows) in _GAVE_UP.json
beside the checkpoints, and the windows every start passes over in _NONFINITE.json. This reads
both from the job's checkpoint location (S3, with your credentials) or --checkpoint-dir (for
FSx, copy the two files out), in the words the job's own next start uses
(training/log_format.py). Exit 1 where a give-up is recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from training.log_format import GAVE_UP_RECORD, NONFINITE_RECORD, give_up_words, window_words


EXAMPLES = ["-c env=prod", "-c env=prod --format json", "--checkpoint-dir ./copied-from-fsx"]


def arguments(parser) -> None:
    """The command's own flags (cli/main.py adds the environment's and AWS's)."""
    parser.add_argument("--checkpoint-dir", metavar="URI", help="s3://bucket/prefix or a local folder (default: the job's, from config)")
    parser.add_argument("--format", choices=["text", "json"], default="text")


class RecordError(Exception):
    """The records cannot be read (one line)."""


def read(checkpoint_dir: str, *, s3_client=None) -> tuple[list[dict], list[dict]]:
    """(the give-ups, the non-finite windows) recorded under `checkpoint_dir`: s3://bucket/prefix
    (read with `s3_client`) or a folder on this machine. A record not there is an empty list."""
    return _record(checkpoint_dir, GAVE_UP_RECORD, "gave_up", s3_client), _record(checkpoint_dir, NONFINITE_RECORD, "windows", s3_client)


def _record(base: str, name: str, key: str, s3_client) -> list[dict]:
    if base.startswith("s3://"):
        bucket, _, prefix = base[len("s3://"):].partition("/")
        from botocore.exceptions import ClientError

        try:
            body = s3_client.get_object(Bucket=bucket, Key=f"{prefix.rstrip('/')}/{name}" if prefix else name)["Body"].read()
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                return []
            raise RecordError(f"cannot read {base.rstrip('/')}/{name}: {code}: {err.response.get('Error', {}).get('Message', '')}") from None
    else:
        folder = Path(base)
        if not folder.is_dir():
            raise RecordError(f"{base} is not a folder on this machine (the FSx checkpoints are mounted in the cluster's pods: copy "
                              f"{GAVE_UP_RECORD} and {NONFINITE_RECORD} out of it and pass their folder with --checkpoint-dir)")
        if not (folder / name).is_file():
            return []
        body = (folder / name).read_bytes()
    try:
        return json.loads(body)[key]
    except (ValueError, KeyError, TypeError):
        raise RecordError(f"{base.rstrip('/')}/{name} is not a record train.py writes (a JSON object with {key!r})") from None


def to_text(checkpoint_dir: str, gave_up: list[dict], windows: list[dict]) -> str:
    """The records in words, the give-ups first; a line that says so where there are none."""
    lines = [f"checkpoints: {checkpoint_dir}"]
    if gave_up:
        lines += [f"gave up {give_up_words(event)}" + (f"; printed by the start at {event['printed_at']}" if event.get("printed_at") else
                                                        "; no start has run since") for event in gave_up]
    else:
        lines.append("no give-up recorded")
    if windows:
        lines += [f"passed over on every start: {window_words(w)}" + (f", stopped on with checkpoint step={w['resume_from']}"
                                                                       if w.get("resume_from") is not None else "") for w in windows]
    else:
        lines.append("no non-finite window recorded")
    return "\n".join(lines) + "\n"


def command(settings, args) -> int:
    """`hyperpod-cdk job-record`: the records of the job `settings` render (or --checkpoint-dir's),
    printed as text or JSON; 1 where a give-up is recorded."""
    from manifests import job as job_manifest

    where = args.checkpoint_dir or job_manifest.checkpoint_uri(settings)
    client = None
    if where.startswith("s3://"):
        import boto3
        from botocore.exceptions import BotoCoreError

        try:
            client = boto3.Session(profile_name=args.profile, region_name=args.region or settings.region).client("s3")
        except BotoCoreError as err:
            raise RecordError(f"--profile {args.profile}: {err}") from None
    gave_up, windows = read(where, s3_client=client)
    if args.format == "json":
        sys.stdout.write(json.dumps({"checkpoint_dir": where, "gave_up": gave_up, "windows": windows}, indent=2) + "\n")
    else:
        sys.stdout.write(to_text(where, gave_up, windows))
    return 1 if gave_up else 0
