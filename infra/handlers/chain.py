"""One link of a chained wait, for the CDK provider framework's on_event / is_complete.

CloudFormation gives a custom resource at most an hour (ServiceTimeout), so a longer wait is
several custom resources in a row, each created after the one before it. Each link waits at
most its own `LinkSeconds`; a link that runs out of time hands over to the next one (it
completes), and only the last link fails, naming what is still missing after the whole wait.

A check returns the lines that say what is not ready yet (none: ready). It raises `NotYet` for
a failure that may pass (throttling, a cluster not visible yet, a connection reset): the link
keeps polling and, if the wait ends, reports that error too. Any other exception fails the
resource at once (access denied needs a person, not an hour of polling).

Every call ends inside the handler's Lambda timeout: a function killed mid-call is FAILED
for the provider framework, with no next poll. `client` gives botocore clients the timeouts
and retries of infra/timing.py (handed over as the function's environment) and refuses to
start a call the invocation has no time left to finish: that is a `NotYet` too.
"""

from __future__ import annotations

import os
import time


class NotYet(Exception):
    """A transient failure: keep waiting."""


def setting(name: str) -> float:
    """One of infra/timing.py's handler settings, from the function's environment."""
    return float(os.environ[name])


def within_time(context, what: str) -> None:
    """Raise NotYet where the invocation has less time left than a call and the reply may
    take (CALL_BUDGET_S): the call would be cut off with the function."""
    if context is None:
        return
    left = context.get_remaining_time_in_millis() / 1000
    budget = setting("CALL_BUDGET_S")
    if left < budget:
        raise NotYet(f"{what}: {left:.0f}s left of this invocation, a call may need {budget:.0f}s; the next poll asks")


def client(service: str, region: str, context=None):
    """A botocore client whose every call ends in time: connect and read timeouts and a
    bounded retry count (infra/timing.py), and no call started without the time to finish."""
    import botocore.session
    from botocore.config import Config

    config = Config(
        connect_timeout=setting("SDK_CONNECT_TIMEOUT_S"),
        read_timeout=setting("SDK_READ_TIMEOUT_S"),
        retries={"mode": "standard", "total_max_attempts": int(setting("SDK_MAX_ATTEMPTS"))},
    )
    made = botocore.session.get_session().create_client(service, region_name=region, config=config)
    made.meta.events.register("before-call", lambda model, **_: within_time(context, f"{service} {model.name}"))
    return made


def waits(event: dict, on_delete: bool) -> bool:
    """A gate waits when the resource is created or updated; a final step when it is deleted."""
    return (event["RequestType"] == "Delete") == on_delete


def start(event: dict, physical_id: str, *, on_delete: bool = False, now=time.time) -> dict:
    # A deletion must keep the physical id it was created with.
    physical_id = event["PhysicalResourceId"] if event["RequestType"] == "Delete" else physical_id
    if not waits(event, on_delete):
        return {"PhysicalResourceId": physical_id}
    seconds = int(event["ResourceProperties"]["LinkSeconds"])
    return {"PhysicalResourceId": physical_id, "Data": {"Deadline": str(int(now() + seconds))}}


def poll(event: dict, check, timed_out, *, on_delete: bool = False, now=time.time) -> dict:
    """`check()` -> lines still missing; `timed_out(missing, error, minutes)` -> the final message."""
    if not waits(event, on_delete):
        return {"IsComplete": True}
    props = event["ResourceProperties"]
    error = None
    try:
        missing = check()
    except NotYet as err:
        missing, error = ["not checked"], str(err)
    if not missing:
        return {"IsComplete": True}
    if now() < float(event["Data"]["Deadline"]):
        return {"IsComplete": False}
    if props["Link"].split("/")[0] != props["Link"].split("/")[1]:
        return {"IsComplete": True, "Data": {"HandedOver": "true"}}  # the next link waits on
    raise TimeoutError(timed_out(missing, error, int(props["TotalSeconds"]) // 60))
