"""What a change takes away from an environment's protection, its teams' isolation or its add-ons'
currency is a callout a reviewer must stop at, with the before and the after, what it costs, and
its SARIF result on the cdk.json line that changed it. Before/after configs of the committed
cdk.json; no synthesis (the stateful resources are read from small templates)."""

from __future__ import annotations

import json
from pathlib import Path

from cli.review import config_diff, protection, sarif
from cli.review.assembly import StackSummary
from tests.conftest import CONTEXT


def _changed(env: str, edit) -> dict:
    context = json.loads(json.dumps(CONTEXT))
    edit(context["environments"][env])
    return context


def _placed(old: dict, new: dict, env: str, tmp_path: Path, callouts: list[tuple[str, list[str]]]) -> list[tuple[str, str, str]]:
    """(rule, level, the cdk.json line) of each callout as the review's SARIF places it."""
    (tmp_path / "cdk.json").write_text(json.dumps({"context": new}, indent=1))
    report = {"refused": [], "nag": {"errors": []}, "cfn_lint": [], "iam": {"unknown_actions": [], "on_any_resource": []},
              "risk": {"public_endpoints": [], "open_ingress": []}, "stacks": [],
              "changes": {"callouts": [text for text, _ in callouts], "anchors": dict(callouts),
                          "config_changes": config_diff.changed(old, new, env)}}
    text = (tmp_path / "cdk.json").read_text().splitlines()
    out = []
    for result in sarif.findings(report, sarif.Places(tmp_path, env)):
        region = result["locations"][0]["physicalLocation"]["region"]
        out.append((result["ruleId"], result["level"], text[region["startLine"] - 1].strip().rstrip(",")))
    return out


def _bucket(policy: str) -> StackSummary:
    return StackSummary("hyperpod-prod-operations", {"Resources": {
        "Data": {"Type": "AWS::S3::Bucket", "DeletionPolicy": policy, "Metadata": {"aws:cdk:path": "hyperpod-prod-operations/Data/Resource"}},
    }}, [])


def test_prods_data_no_longer_kept_is_protection_off_with_what_is_deleted_at_its_line(tmp_path):
    new = _changed("prod", lambda p: p.update(protection={"retain_data": False}))
    found = protection.compare(CONTEXT, new, "prod", [_bucket("Retain")], [_bucket("Delete")])
    (text, _), = found
    assert text.startswith("PROTECTION OFF: prod no longer keeps its data when a stack is deleted (protection.retain_data true -> false)")
    assert "1 Bucket are deleted with their stacks" in text and "lost with them" in text
    assert _placed(CONTEXT, new, "prod", tmp_path, found) == [("change/protection-off", "error", '"retain_data": false')]


def test_termination_protection_off_says_how_many_stacks_one_delete_removes(tmp_path):
    new = _changed("prod", lambda p: p.update(protection={"termination_protection": False}))
    found = protection.compare(CONTEXT, new, "prod", stacks=["a", "b", "c"])
    (text, _), = found
    assert "(protection.termination_protection true -> false): its 3 stacks" in text
    assert _placed(CONTEXT, new, "prod", tmp_path, found) == [("change/protection-off", "error", '"termination_protection": false')]
    # dev has it off already: keeping it off, or turning it on, is no callout
    assert protection.compare(CONTEXT, CONTEXT, "dev") == []
    on = _changed("dev", lambda d: d["protection"].update(termination_protection=True))
    assert protection.compare(CONTEXT, on, "dev") == []


def test_a_teams_pod_security_lowered_is_called_out_at_its_field(tmp_path):
    new = _changed("prod", lambda p: p["governance"]["teams"][0].update(pod_security="baseline"))
    found = protection.compare(CONTEXT, new, "prod")
    (text, fields), = found
    assert text.startswith("POD SECURITY LOWERED: team ml-research's namespace enforces the baseline Pod Security Standard "
                           "instead of restricted (governance.teams[ml-research].pod_security restricted -> baseline)")
    assert _placed(CONTEXT, new, "prod", tmp_path, found) == [("change/pod-security-lowered", "warning", '"pod_security": "baseline"')]
    # raised back is no callout
    assert protection.compare(new, CONTEXT, "prod") == []


def test_a_removed_add_on_pin_says_the_installed_version_is_kept_not_an_eks_default(tmp_path):
    new = _changed("prod", lambda p: p["addons"]["cert_manager"].pop("version"))
    found = protection.compare(CONTEXT, new, "prod")
    (text, _), = found
    assert text.startswith("PIN REMOVED: add-on cert_manager is no longer pinned (addons.cert_manager.version "
                           "v1.18.2-eksbuild.2 -> unset): EKS keeps the version installed now")
    assert "EKS default" not in text
    # the field is gone: the result stands at the nearest line written (the add-on's block)
    ((rule, _, line),) = _placed(CONTEXT, new, "prod", tmp_path, found)
    assert rule == "change/pin-removed" and line == '"cert_manager": {}'


def test_an_environment_moved_to_another_account_names_what_stays_behind_and_its_cost():
    new = _changed("prod", lambda p: p.update(account="222222222222"))
    text, fields = protection.moved(CONTEXT, new, "prod", "aws://111111111111/us-east-1", "aws://222222222222/us-east-1")
    assert text.startswith("ENVIRONMENT MOVED: prod moves from aws://111111111111/us-east-1 to aws://222222222222/us-east-1 "
                           "(account): this is a first deploy there")
    assert "hyperpod-prod-cluster" in text and "hyperpod-prod-hyperpod" in text
    # prod's 2 ml.m5.8xlarge and 4 ml.p5.48xlarge at the review's rates (cli/review/prices.py)
    from cli.review.prices import instance_rate

    hourly = 2 * instance_rate("ml.m5.8xlarge")[0] + 4 * instance_rate("ml.p5.48xlarge")[0]
    assert f"about ${hourly:,.2f} an hour in instances alone keep running" in text
    assert "bin/cdk destroy --all -c env=prod" in text and fields == ["account"]


def _git_project(tmp_path: Path, base: dict, head: dict) -> tuple[Path, str]:
    import subprocess

    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "cdk.json").write_text(json.dumps({"context": base}, indent=1))
    subprocess.run([*git, "add", "cdk.json"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "cdk.json").write_text(json.dumps({"context": head}, indent=1))
    return tmp_path, commit


def _report(callouts: dict, revision: str) -> dict:
    return {"refused": [], "nag": {"errors": []}, "cfn_lint": [], "iam": {"unknown_actions": [], "on_any_resource": []},
            "risk": {"public_endpoints": [], "open_ingress": []}, "stacks": [], "env": "prod",
            "changes": {"callouts": list(callouts), "anchors": callouts, "config_changes": [], "revision": revision}}


def test_a_removed_teams_result_stands_on_a_line_the_pull_request_changed(tmp_path):
    # A team removed, its share given to the other: the removed team's lines are gone, and the nearest line the
    # change wrote is the other's weight (GitHub shows a code-scanning alert in a pull request only on a changed line).
    def edit(prod: dict) -> None:
        prod["governance"]["teams"].pop()
        prod["governance"]["teams"][0]["fair_share_weight"] = 100

    new = _changed("prod", edit)
    project, base = _git_project(tmp_path, CONTEXT, new)
    assert [l.strip() for n, l in enumerate((project / "cdk.json").read_text().splitlines(), 1)
            if n in sarif.changed_lines(project, base)] == ['"fair_share_weight": 100,']
    callout = "TEAM REMOVED: team ml-production leaves"
    (result,) = sarif.log(_report({callout: ["governance.teams[ml-production]"]}, base), project, "prod")["runs"][0]["results"]
    line = result["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert line in sarif.changed_lines(project, base) and result["properties"]["inline"] is True
    assert "(shown at the nearest line this change writes; the field is at line" in result["message"]["text"]
    # A field the change wrote keeps its own line, and says nothing more.
    lowered = _changed("prod", lambda p: p["governance"]["teams"][0].update(pod_security="baseline"))
    (project / "cdk.json").write_text(json.dumps({"context": lowered}, indent=1))
    found = protection.compare(CONTEXT, lowered, "prod")
    (result,) = sarif.log(_report(dict(found), base), project, "prod")["runs"][0]["results"]
    text = (project / "cdk.json").read_text().splitlines()
    assert text[result["locations"][0]["physicalLocation"]["region"]["startLine"] - 1].strip() == '"pod_security": "baseline"'
    assert "shown at the nearest" not in result["message"]["text"]


def test_a_callout_of_a_change_that_writes_no_line_of_cdk_json_is_said_in_the_summary(tmp_path):
    from cli.review import report as review

    # The last team removed and nothing else: the removal only deletes lines, so no line can hold its result.
    project, base = _git_project(tmp_path, CONTEXT, _changed("prod", lambda p: p["governance"]["teams"].pop()))
    assert sarif.changed_lines(project, base) == set()
    report = _report({"TEAM REMOVED: team ml-production leaves": ["governance.teams[ml-production]"]}, base)
    assert sarif.log(report, project, "prod")["runs"][0]["results"][0]["properties"]["inline"] is False
    md = review._callout_lines({**report["changes"], "not_inline": ["TEAM REMOVED"]})
    assert md[-1] == ("Not shown inline in the pull request (TEAM REMOVED): it changes no line of cdk.json, so these stand in "
                      "code scanning and here only.")


def test_auto_patching_a_gpu_group_and_the_clusters_policies_stand_at_their_fields(tmp_path):
    # The callouts of cli/review/changes.py (_auto_patch, _cluster_policies) name no field themselves: their kind does.
    def edit(prod: dict) -> None:
        prod["hyperpod"]["instance_groups"][1]["auto_patch"] = {"strategy": "RollingUpdate"}
        prod["eks"]["upgrade_policy"] = "STANDARD"

    new = _changed("prod", edit)
    callouts = [("AUTO PATCH: instance group gpu in hyperpod-prod-hyperpod: the next patch restarts its nodes", []),
                ("SUPPORT TIER: EKS cluster `Cluster` in hyperpod-prod-cluster goes from EXTENDED to STANDARD support", [])]
    placed = _placed(CONTEXT, new, "prod", tmp_path, callouts)
    assert [(rule, line) for rule, _, line in placed] == [("change/auto-patch", '"strategy": "RollingUpdate"'),
                                                         ("change/support-tier", '"upgrade_policy": "STANDARD"')]


def test_a_removed_groups_result_stands_at_the_list_it_left_or_the_nearest_line_changed(tmp_path):
    def edit(prod: dict) -> None:
        prod["hyperpod"]["instance_groups"].pop()  # the GPU group goes
        prod["hyperpod"]["instance_groups"][0]["count"] = 3  # and the system group grows

    new = _changed("prod", edit)
    project, base = _git_project(tmp_path, CONTEXT, new)
    callout = "NODES REMOVED: instance group gpu in hyperpod-prod-hyperpod is removed; its 4 node(s) are terminated"
    (result,) = sarif.log(_report({callout: []}, base), project, "prod")["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "cdk.json" and result["properties"]["inline"] is True
    text = (project / "cdk.json").read_text().splitlines()
    assert text[location["region"]["startLine"] - 1].strip() == '"count": 3'


def test_a_change_to_the_served_endpoint_is_called_out_at_its_field_and_a_moved_port_says_the_gap(tmp_path):
    # render-endpoint's InferenceEndpointConfig on each side (manifests/endpoint.py), one image for both: the stacks
    # deploy no endpoint, a team applies it, so the deploy changes none; the namespace's opening (its port) moves at deploy.
    from cli.review import deltas
    from infra import config, validation
    from tests.conftest import CAPABILITIES, patched_context

    def serving(endpoint: dict) -> dict:
        return patched_context("dev", config.deep_merge(CAPABILITIES["inference"], {"inference": {"endpoint": endpoint}}))

    def settings(context: dict):
        return validation.load_settings(context, "dev")[0]

    old = serving({})
    assert deltas._endpoint((settings(old), settings(old))) == ([], [])
    new = serving({"port": 9000})
    lines, found = deltas._endpoint((settings(old), settings(new)))
    (text, where), = found
    assert text.startswith("ENDPOINT REDEPLOYS: the endpoint llama3-1-8b-serving that `render-endpoint` prints changes "
                           "(spec.worker.args, spec.worker.modelInvocationPort.containerPort): the deploy leaves the running "
                           "endpoint as it is; applying it again rolls its model servers")
    assert text.endswith("moves its namespace's opening from port 8000 to 9000: the running endpoint is unreachable from then "
                         "until it is applied again")
    assert lines == ["Endpoint llama3-1-8b-serving: 2 field(s) of its InferenceEndpointConfig change"]
    assert _placed(old, new, "dev", tmp_path, found) == [("change/endpoint-redeploys", "warning", '"port": 9000')]
    (text, _), = deltas._endpoint((settings(old), settings(serving({"invocation_path": "v1/chat/completions"}))))[1]
    assert "(spec.invocationEndpoint)" in text and "opening" not in text
    # Serving switched on is the operator's SERVING callout (cli/review/cluster_wide.py), not this one.
    assert deltas._endpoint((settings(patched_context("dev", {})), settings(old))) == ([], [])
    # An endpoint of no team serves from `default`, which no default deny closes: no opening to move.
    def teamless(port: int) -> dict:
        context = patched_context("dev", {"inference": {"enabled": True, "endpoint": {"port": port}}})
        context["environments"]["dev"]["governance"] = {"teams": []}
        context["environments"]["dev"]["sample_job"]["team"] = None
        return context

    (text, _), = deltas._endpoint((settings(teamless(8000)), settings(teamless(9000))))[1]
    assert "spec.worker.modelInvocationPort.containerPort" in text and "opening" not in text
