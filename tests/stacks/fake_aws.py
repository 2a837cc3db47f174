#!/usr/bin/env python3
"""The AWS CLI as the pipeline's check steps call it, answered from files, for running a step's
commands here as CodeBuild runs them (tests/stacks/test_pipeline_steps.py). Each call is held to
botocore's service model first: the operation exists, and every parameter given is a member of its
input shape and every required one is given (the same model the AWS CLI builds its options from).

FAKE_AWS_DEPLOYED: a folder of `<stack>.json`, what `cloudformation get-template` returns (a stack
without a file does not exist, as CloudFormation says); FAKE_AWS_S3: where `s3 cp` copies to, by
bucket and key; FAKE_AWS_CALLS: a file each call is appended to, one JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import botocore.session


def _options(args: list[str]) -> tuple[list[str], dict[str, str | bool]]:
    words, options, i = [], {}, 0
    while i < len(args):
        if args[i].startswith("--"):
            takes_value = i + 1 < len(args) and not args[i + 1].startswith("--")
            options[args[i][2:]] = args[i + 1] if takes_value else True
            i += 2 if takes_value else 1
        else:
            words.append(args[i])
            i += 1
    return words, options


def _member(option: str) -> str:
    """A CLI option's botocore member (--role-arn: RoleArn; --no-x: X): how the AWS CLI names them."""
    return "".join(part.capitalize() for part in option.removeprefix("no-").split("-"))


def _check_against_model(service: str, command: str, options: dict) -> None:
    """The operation and its parameters as botocore's model has them (--query and --output are the CLI's own)."""
    model = botocore.session.get_session().get_service_model(service)
    operation = _member(command)
    if operation not in model.operation_names:
        sys.exit(f"fake aws: {service} has no operation {operation}")
    shape = model.operation_model(operation).input_shape
    given = {_member(k) for k in options if k not in ("query", "output")}
    if unknown := given - set(shape.members):
        sys.exit(f"fake aws: {service} {command}: no such parameter {sorted(unknown)} in botocore's {operation}")
    if missing := set(shape.required_members) - given:
        sys.exit(f"fake aws: {service} {command}: missing required {sorted(missing)}")


def main(argv: list[str]) -> int:
    words, options = _options(argv)
    with open(os.environ["FAKE_AWS_CALLS"], "a") as calls:
        calls.write(json.dumps({"args": argv, "key": os.environ.get("AWS_ACCESS_KEY_ID")}) + "\n")
    service, command = words[0], words[1]
    if service == "s3" and command == "cp":
        source, target = words[2], words[3]
        bucket_key = target.removeprefix("s3://")
        include = options.get("include")
        for path in sorted(Path(source).rglob("*") if options.get("recursive") else [Path(source)]):
            if path.is_file() and (not isinstance(include, str) or path.match(include)):
                dest = Path(os.environ["FAKE_AWS_S3"]) / bucket_key / path.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, dest)
        return 0
    _check_against_model(service, command, options)
    if (service, command) == ("sts", "assume-role"):
        print(f"ASIAFAKE{options['role-session-name'][:8].upper()}\tsecret\ttoken\t2026-12-07T18:00:00+00:00")
        return 0
    if (service, command) == ("cloudformation", "get-template"):
        found = Path(os.environ["FAKE_AWS_DEPLOYED"]) / f"{options['stack-name']}.json"
        if not found.is_file():
            print(f"An error occurred (ValidationError) when calling the GetTemplate operation: Stack with id "
                  f"{options['stack-name']} does not exist", file=sys.stderr)
            return 254
        print(found.read_text())
        return 0
    if (service, command) == ("cloudformation", "update-termination-protection"):
        return 0
    sys.exit(f"fake aws: nothing answers {service} {command}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
