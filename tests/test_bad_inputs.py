"""The bad-input corpus: every file in tests/bad_inputs is a small patch over dev that must
be refused through app.py's real entry point and through `hyperpod-cdk validate`, with a
line naming the same field and no traceback.

app.main() runs in this process with the context the CDK CLI would pass, and validate runs
in this process on a project folder's cdk.json; the cases marked `cdk_cli` also go through
the `cdk synth` command itself, several to a run (_cli_runs), each refused in its run naming its
field and with the lines validate prints for the same folder.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cli import main as cli
from infra import config
from tests.conftest import cdk_project, patched_context, run_cdk

CORPUS = sorted((Path(__file__).parent / "bad_inputs").glob("*.json"))


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 25


def _context_for(case: dict) -> dict:
    ctx = patched_context("dev", case["patch"])
    return {**ctx, "env": "dev"}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bad_input_is_refused_naming_the_field(path, capsys, monkeypatch):
    import app

    case = json.loads(path.read_text())
    outdir = path.parent / ".never-written"
    assert app.main({**_context_for(case), "outdir": str(outdir)}) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [l for l in err.splitlines() if l.startswith("error: dev: ")]
    assert any(l.startswith(f"error: dev: {case['field']}:") for l in lines), err
    assert not outdir.exists()


def _project(case: dict, where: Path) -> Path:
    """A folder with the case's cdk.json, as a user's checkout would have it (a legal case may
    patch another environment than dev: its `env`)."""
    return cdk_project(patched_context(case.get("env", "dev"), case["patch"]), where)


CLI_CASES = tuple(p for p in CORPUS if json.loads(p.read_text()).get("cdk_cli"))


def test_the_corpus_goes_through_the_cdk_cli_often_enough():
    assert len(CLI_CASES) >= 30


def _refused_with(patch: dict) -> list[str]:
    """The problems app.py and validate refuse `patch` over dev with (registry.load: their one reader)."""
    from addons import registry
    from infra.config import ConfigError

    try:
        registry.load(_context_for({"patch": patch}), "dev")
    except ConfigError as err:
        return err.problems
    return []


def _leaves(patch: dict, at: tuple = ()) -> set[tuple]:
    """The paths a patch sets (a list, like instance_groups, is one value: merging replaces it)."""
    out = set()
    for key, value in patch.items():
        out |= _leaves(value, (*at, key)) if isinstance(value, dict) and value else {(*at, key)}
    return out


@functools.cache
def _cli_runs(cases: tuple[Path, ...]) -> tuple[tuple[tuple[Path, ...], dict], ...]:
    """The CLI cases as runs of `cdk synth`, each refusing several cases at once (app.py says every
    problem, a line each), with the merged patch each run synthesizes. A case joins the first run
    that sets none of the paths it sets and whose merged config is still refused naming every
    case's field; otherwise it starts a run of its own (a case whose field another would hide,
    or one more case that replaces the instance groups). A run costs about 1.3 CPU-s, most of it
    the CDK CLI's own start: 52 cases take 18 runs. Worked out once per session."""
    runs: list[dict] = []
    for path in cases:
        case = json.loads(path.read_text())
        mine = _leaves(case["patch"])
        for run in runs:
            if any(a[: len(b)] == b or b[: len(a)] == a for a in run["paths"] for b in mine):
                continue
            merged = config.deep_merge(run["patch"], case["patch"])
            refused = _refused_with(merged)
            if all(any(line.startswith(f"dev: {field}:") for line in refused) for field in [*run["fields"], case["field"]]):
                run["members"].append(path)
                run["fields"].append(case["field"])
                run["patch"] = merged
                run["paths"] |= mine
                break
        else:
            runs.append({"members": [path], "fields": [case["field"]], "patch": case["patch"], "paths": mine})
    return tuple((tuple(run["members"]), run["patch"]) for run in runs)


def _errors(stderr: str) -> list[str]:
    return sorted(line for line in stderr.splitlines() if line.startswith("error: "))


@pytest.fixture(scope="module")
def cdk_synth_verdicts(tmp_path_factory) -> dict[str, tuple[int, str, bool, str, list[str]]]:
    """Per case: (exit status, stderr, whether any template was written) of the `cdk synth` run it
    was refused in (_cli_runs; two runs at a time), validate's stderr on that run's folder, and
    the cases refused beside it."""
    root = tmp_path_factory.mktemp("bad-cli")

    def run(numbered: tuple[int, tuple[tuple[Path, ...], dict]]):
        number, (members, patch) = numbered
        project = cdk_project(patched_context("dev", patch), root / f"run-{number}")
        result = run_cdk("synth", "--quiet", "-o", str(project / "out"), cwd=project)
        return members, project, (result.returncode, result.stderr, bool(list((project / "out").glob("*.template.json"))))

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(run, enumerate(_cli_runs(CLI_CASES))))
    verdicts = {}
    for members, project, cdk_synth in done:
        validated = io.StringIO()
        with contextlib.chdir(project), contextlib.redirect_stderr(validated):
            cli.main(["validate", "-c", "env=dev"])
        for path in members:
            verdicts[path.stem] = (*cdk_synth, validated.getvalue(), [m.stem for m in members])
    return verdicts


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_validate_refuses_it_naming_the_same_field(path, tmp_path, capsys, monkeypatch):
    case = json.loads(path.read_text())
    monkeypatch.chdir(_project(case, tmp_path / "project"))
    assert cli.main(["validate", "-c", "env=dev"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"error: dev: {case['field']}:" in err, err


@pytest.mark.parametrize("path", CLI_CASES, ids=lambda p: p.stem)
def test_cdk_synth_refuses_it_as_validate_does(path, cdk_synth_verdicts):
    case = json.loads(path.read_text())
    code, err, wrote, validated, together = cdk_synth_verdicts[path.stem]
    assert code != 0 and not wrote
    assert f"error: dev: {case['field']}:" in err and "Traceback" not in err, err[-2000:]
    # validate refuses the same config with the same lines, every case of the run's
    assert _errors(err) == _errors(validated) and len(_errors(err)) >= len(together), (together, err[-2000:], validated[-2000:])


def test_the_cli_runs_refuse_several_cases_each_and_every_case_once():
    runs = _cli_runs(CLI_CASES)
    assert sorted(p for members, _ in runs for p in members) == list(CLI_CASES)
    assert len(runs) < len(CLI_CASES) / 2


LEGAL = sorted((Path(__file__).parent / "legal_inputs").glob("*.json"))


def test_the_legal_corpus_is_large_enough():
    assert len(LEGAL) >= 10


@pytest.mark.parametrize("path", LEGAL, ids=lambda p: p.stem)
def test_an_unusual_but_legal_config_is_accepted_by_validate(path, tmp_path, capsys, monkeypatch):
    case = json.loads(path.read_text())
    env = case.get("env", "dev")
    monkeypatch.chdir(_project(case, tmp_path / "project"))
    assert cli.main(["validate", "-c", f"env={env}"]) == 0, capsys.readouterr().err
    # A legal case may still deserve a word (a job admitted only by borrowing): it says which.
    if "warns" in case:
        assert f"warning: {env}: {case['warns']}" in capsys.readouterr().err


@pytest.mark.parametrize("path", [p for p in LEGAL if json.loads(p.read_text()).get("synthesize")], ids=lambda p: p.stem)
def test_a_legal_config_in_a_region_of_its_own_synthesizes(path, synth):
    # In this process, composed and checked as `cdk synth` does (cli/synth.py: both nag packs and
    # CDK's bundled validator, whose region lists are snapshots too: us-west-2's lacks
    # ClusterSchedulerConfig, acknowledged on that construct by infra/compliance.acknowledge_regional_snapshot,
    # a warning, never a refusal). That the CLI's validator findings are this synthesis's is
    # tests/test_quality_gates.py's CLI run; the warning is validate's, tested with every legal case.
    case = json.loads(path.read_text())
    s = synth(case.get("env", "dev"), case["patch"])
    assert s.settings.region == case["patch"]["region"]
    (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    assert cluster["Properties"]["InstanceGroups"]
    # What CDK's validator finds of the region's snapshot is acknowledged where it stands, never left a refusal.
    (validator,) = [p for p in s.report["pluginReports"] if p["pluginName"] == "CloudFormation Validate"]
    assert not validator.get("violations")
    if case["patch"]["region"] == "us-west-2":
        assert any("'AWS::SageMaker::ClusterSchedulerConfig' does not exist in 'us-west-2'" in v["description"]
                   for v in validator["suppressedViolations"])


def test_the_unusual_configs_together_synthesize(synth):
    """One synthesis of every legal case at once (the two endpoint modes synthesize in
    tests/stacks/test_cluster.py): what validation accepts, CDK builds."""
    merged: dict = {}
    for path in LEGAL:
        patch = json.loads(path.read_text())["patch"]
        if "eks" not in patch and "region" not in patch:  # a region synthesizes above, on its own
            merged = config.deep_merge(merged, patch)
    # Lists replace when merged: the cases that change the same list, combined by hand.
    merged["network"]["hyperpod_subnets"] = [{"availability_zone": "us-east-1a", "cidr": "100.64.0.0/28"}]
    labels = {f"k{i}": "v" for i in range(49)} | {"team": "a" * 63}
    merged["hyperpod"]["instance_groups"] = [
        {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1, "labels": labels, "scheduled_update": {"schedule": "cron(0 3 29 2 ? *)"}},
    ]
    s = synth("dev", merged)
    (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    gpu = next(g for g in cluster["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "gpu")
    assert len(gpu["KubernetesConfig"]["Labels"]) == 50 and len(cluster["Properties"]["Tags"]) == 50
    assert gpu["ScheduledUpdateConfig"]["ScheduleExpression"] == "cron(0 3 29 2 ? *)"


def test_the_security_page_counts_the_corpus_as_it_is():
    from tests import doc_pages

    readme = doc_pages.shown("security.md")
    assert f"`tests/bad_inputs/` holds {len(CORPUS)} invalid configs" in readme
    assert f"the {len(CLI_CASES)} marked `cdk_cli` also through the `cdk synth` command" in readme
    assert f"do not overlap ({len(_cli_runs(CLI_CASES))} runs)" in readme
