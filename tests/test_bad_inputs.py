"""The bad-input corpus: every file in tests/bad_inputs is a small patch over dev that must
be refused through app.py's real entry point and through `hyperpod-cdk validate`, with a
line naming the same field and no traceback.

app.main() runs in this process with the context the CDK CLI would pass, and validate runs
in this process on a project folder's cdk.json; the cases marked `cdk_cli` also go through
the `cdk synth` command itself (about 2 s each: app.py refuses before jsii starts).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cli import main as cli
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


CLI_CASES = [p for p in CORPUS if json.loads(p.read_text()).get("cdk_cli")]


def test_the_corpus_goes_through_the_cdk_cli_often_enough():
    assert len(CLI_CASES) >= 30


@pytest.fixture(scope="module")
def cdk_synth_verdicts(tmp_path_factory) -> dict[str, tuple[int, str, bool]]:
    """(exit status, stderr, whether any template was written) of `cdk synth` per case,
    two at a time."""
    root = tmp_path_factory.mktemp("bad-cli")

    def run(path: Path):
        project = _project(json.loads(path.read_text()), root / path.stem)
        result = run_cdk("synth", "--quiet", "-o", str(project / "out"), cwd=project)
        return path.stem, (result.returncode, result.stderr, bool(list((project / "out").glob("*.template.json"))))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, CLI_CASES))


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
    code, err, wrote = cdk_synth_verdicts[path.stem]
    assert code != 0 and not wrote
    assert f"error: dev: {case['field']}:" in err and "Traceback" not in err, err[-2000:]


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


LEGAL_CLI_CASES = [p for p in LEGAL if json.loads(p.read_text()).get("cdk_cli")]


@pytest.mark.parametrize("path", LEGAL_CLI_CASES, ids=lambda p: p.stem)
def test_a_legal_config_synthesizes_through_the_cdk_cli_with_its_warning(path, tmp_path):
    # The user's path: `cdk synth` itself, CDK's bundled CloudFormation validator included
    # (whose own region lists lack ClusterSchedulerConfig in us-west-2: acknowledged on that
    # construct, infra/compliance.acknowledge_regional_snapshot). A warning, never a refusal.
    case = json.loads(path.read_text())
    env = case.get("env", "dev")
    project = _project(case, tmp_path / "project")
    result = run_cdk("synth", "--quiet", "-c", f"env={env}", "-o", str(project / "out"), cwd=project, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((project / "out").glob("*.template.json"))
    if "warns" in case:
        assert f"{env}: {case['warns']}" in result.stderr


def test_the_unusual_configs_together_synthesize(synth):
    """One synthesis of every legal case at once (the two endpoint modes synthesize in
    tests/stacks/test_cluster.py): what validation accepts, CDK builds."""
    from infra import config

    merged: dict = {}
    for path in LEGAL:
        patch = json.loads(path.read_text())["patch"]
        if "eks" not in patch and "region" not in patch:  # the regions synthesize through the CLI above
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
