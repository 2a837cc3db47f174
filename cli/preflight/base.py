"""What every preflight check is made of: the line it reports (`Result`), the boto3 clients it
asks (`Clients`: one per service, made once; the tests hand in stubbed ones) and the error
code of a refused call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    check: str
    status: str  # pass | warn | fail
    detail: str
    action: str = ""
    section: str = ""  # "drift": the deployed cluster against config


class Clients:
    """One boto3 client per service, from a session; tests may hand in stubbed ones."""

    def __init__(self, session, region: str, overrides: dict | None = None):
        self.session, self.region = session, region
        self.cache = dict(overrides or {})

    def __call__(self, service: str):
        if service not in self.cache:
            self.cache[service] = self.session.client(service, region_name=self.region)
        return self.cache[service]


def error_code(err) -> str:
    return getattr(err, "response", {}).get("Error", {}).get("Code", type(err).__name__)
