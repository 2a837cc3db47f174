"""The review of the environment that holds the pipeline calls out a change to who a person
approves, or to where the pipeline runs, at the cdk.json line that made it: the pipeline's
self-mutation applies such a change before any approval, so the pull request is where a person
sees it. Before/after configs of the tests' delivery fleet (dev holds the block; prod protected)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.review import approvals, config_diff, sarif
from tests.conftest import CAPABILITIES, FLEETS, patched_context

BASE = patched_context("dev", CAPABILITIES["delivery"], FLEETS["delivery"])


def _changed(edit) -> dict:
    context = json.loads(json.dumps(BASE))
    edit(context)
    return context


def _delivery(context: dict) -> dict:
    return context["environments"]["dev"]["delivery"]


def _results(old: dict, new: dict, tmp_path: Path, env: str = "dev") -> list[tuple[str, str, str]]:
    """(rule, level, the cdk.json line it points at) of each approval callout, as the review's SARIF places it."""
    lines, anchors, notes = approvals.compare(old, new, env)
    assert notes == []
    (tmp_path / "cdk.json").write_text(json.dumps({"context": new}, indent=1))
    report = {"refused": [], "nag": {"errors": []}, "cfn_lint": [], "iam": {"unknown_actions": [], "on_any_resource": []},
              "risk": {"public_endpoints": [], "open_ingress": []}, "stacks": [],
              "changes": {"callouts": lines, "anchors": anchors, "config_changes": config_diff.changed(old, new, env)}}
    text = (tmp_path / "cdk.json").read_text().splitlines()
    out = []
    for result in sarif.findings(report, sarif.Places(tmp_path, env)):
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == "cdk.json"
        out.append((result["ruleId"], result["level"], text[location["region"]["startLine"] - 1].strip().rstrip(",")))
    return out


def test_an_environment_left_out_of_protected_is_an_approval_removed_at_that_line(tmp_path):
    new = _changed(lambda c: _delivery(c).update(protected=["staging"]))
    assert _results(BASE, new, tmp_path) == [
        ("change/approval-removed", "error", '"protected": ['),
        ("change/approval-added", "warning", '"protected": ['),
    ]
    assert "APPROVAL REMOVED: the pipeline now deploys prod with no person's approval" in approvals.compare(BASE, new, "dev")[0][0]


def test_protected_unset_approves_by_termination_protection_and_turning_it_off_removes_the_approval(tmp_path):
    unset = _changed(lambda c: _delivery(c).pop("protected"))
    # Unset, the default approves the environments with termination protection: staging now too, prod still.
    assert [(rule, where) for rule, _, where in _results(BASE, unset, tmp_path)] == [("change/approval-added", '"termination_protection": true')]
    off = json.loads(json.dumps(unset))
    off["environments"]["prod"]["protection"] = {"termination_protection": False}
    (found,) = _results(unset, off, tmp_path)
    assert found == ("change/approval-removed", "error", '"termination_protection": false')
    line = approvals.compare(unset, off, "dev")[0][0]
    assert "deploys prod with no person's approval (delivery.protected is unset and its termination protection is off" in line


def test_moving_the_pipeline_to_another_account_or_region_is_called_out_where_it_is_written(tmp_path):
    moved = _changed(lambda c: _delivery(c).update(account="444444444444"))  # the fleet's pipeline is in 333333333333
    assert _results(BASE, moved, tmp_path) == [("change/pipeline-moved", "error", '"account": "444444444444"')]
    # The pipeline's region defaults to its environment's: moving dev moves it, and the line is dev's region.
    region = _changed(lambda c: c["environments"]["dev"].update(
        region="us-west-2", availability_zones=["us-west-2a", "us-west-2b", "us-west-2c"],
        network={"hyperpod_subnets": [{"availability_zone": "us-west-2a", "cidr": "10.1.0.0/16"}]}))
    ((rule, _, where),) = _results(BASE, region, tmp_path)
    assert rule == "change/pipeline-moved" and where == '"region": "us-west-2"'
    assert "from aws://333333333333/us-east-1 to aws://333333333333/us-west-2" in approvals.compare(BASE, region, "dev")[0][0]


def test_only_the_pipelines_own_review_says_it_and_what_stays_the_same_says_nothing():
    new = _changed(lambda c: _delivery(c).update(protected=[]))
    assert approvals.compare(BASE, new, "prod") == ([], {}, [])  # prod's review is of prod's stacks
    # The same approvals written another way: protected unset, where only prod has termination protection.
    same = _changed(lambda c: _delivery(c).pop("protected"))
    same["environments"]["staging"]["protection"]["termination_protection"] = False
    assert approvals.compare(BASE, same, "dev") == ([], {}, [])
    # An environment that leaves the waves is no longer deployed by the pipeline: nothing to approve.
    gone = _changed(lambda c: _delivery(c).update(waves=[["dev", "staging"]], protected=[]))
    assert approvals.compare(BASE, gone, "dev") == ([], {}, [])

