"""Custom-resource handlers (CDK provider framework): when the resource is deleted, take a
user-initiated backup of the FSx file system and wait until it is AVAILABLE, so the file
system CloudFormation deletes next outlives itself as a backup.

Create and Update do nothing. The backup is requested with a client request token derived
from the file system, so every poll (and a `cdk destroy` run again after a timeout) names the
same backup; FSx refuses a second backup while another (a daily automatic one) runs, which
only delays it.
"""

from __future__ import annotations

import time

from botocore.exceptions import BotoCoreError, ClientError

if __package__:  # imported as infra.handlers.* (the tests)
    from . import chain
else:  # in Lambda the handler folder is the root
    import chain

TRANSIENT = {"BackupInProgress", "ThrottlingException", "InternalServerError", "ServiceLimitExceeded"}


def token(file_system_id: str) -> str:
    """FSx's ClientRequestToken: at most 63 characters of [A-Za-z0-9_.-]."""
    return f"final-backup-{file_system_id}"[:63]


def on_event(event, _context):
    return chain.start(event, f"final-backup-{event['ResourceProperties']['FileSystemId']}", on_delete=True)


def is_complete(event, context, client=None, now=time.time):
    props = event["ResourceProperties"]
    file_system = props["FileSystemId"]
    state: dict = {}

    def check() -> list[str]:
        fsx = client or chain.client("fsx", props["Region"], context)
        try:
            backup = fsx.create_backup(
                FileSystemId=file_system,
                ClientRequestToken=token(file_system),
                Tags=[{"Key": "Name", "Value": f"final backup of {file_system}"}],
            )["Backup"]
        except ClientError as err:
            if err.response["Error"]["Code"] in TRANSIENT:
                raise chain.NotYet(f"CreateBackup: {err}") from err
            raise
        except BotoCoreError as err:
            raise chain.NotYet(f"CreateBackup: {err}") from err
        state["id"], lifecycle = backup["BackupId"], backup["Lifecycle"]
        if lifecycle == "AVAILABLE":
            return []
        if lifecycle in ("FAILED", "DELETED"):
            detail = backup.get("FailureDetails", {}).get("Message", "")
            raise RuntimeError(f"final backup {state['id']} of {file_system} is {lifecycle}: {detail}")
        return [f"backup {state['id']} is {lifecycle}"]

    def timed_out(missing, error, minutes):
        backup = state.get("id", "(not started)")
        return (
            f"FSx file system {file_system}: final backup not AVAILABLE after {minutes} min ({'; '.join(missing)}"
            + (f"; last error: {error}" if error else "")
            + f"). The file system is kept: run cdk destroy again once `aws fsx describe-backups --backup-ids {backup}` "
            "says AVAILABLE"
        )

    return chain.poll(event, check, timed_out, on_delete=True, now=now)
