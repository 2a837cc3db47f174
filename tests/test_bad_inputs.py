"""The bad-input corpus: every file in tests/bad_inputs is a small patch over dev that must
be refused through app.py's real entry point, with a line naming the field and no traceback.

app.main() runs in this process with the context the CDK CLI would pass, so the whole
corpus costs one jsii start; two cases also go through the `cdk` CLI itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import patched_context, run_cdk

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


@pytest.mark.parametrize("name", ["unknown_network_key", "training_operator_without_cert_manager"])
def test_the_cdk_cli_path_refuses_them_too(name, tmp_path):
    case = json.loads((Path(__file__).parent / "bad_inputs" / f"{name}.json").read_text())
    project = tmp_path / "project"
    project.mkdir()
    root = Path(__file__).resolve().parent.parent
    cdk_json = json.loads((root / "cdk.json").read_text())
    cdk_json["context"] = patched_context("dev", case["patch"])
    cdk_json["app"] = f"{root / '.venv' / 'bin' / 'python'} {root / 'app.py'}"
    (project / "cdk.json").write_text(json.dumps(cdk_json))
    result = run_cdk("synth", "--quiet", "-o", str(tmp_path / "out"), cwd=project)
    assert result.returncode != 0
    assert f"error: dev: {case['field']}:" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "out").glob("*.template.json")) if (tmp_path / "out").exists() else True
