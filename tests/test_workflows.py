"""The pull-request workflow (.github/workflows/review.yml): linted by actionlint and zizmor (both
from PyPI, offline) with no findings, and held to what the review needs: each environment of
cdk.json, the make targets the tests run, the base as baseline, SARIF per environment."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import CONTEXT, ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent


def _actionlint(folder: Path) -> subprocess.CompletedProcess:
    files = sorted(str(p) for p in folder.glob("*.y*ml"))
    return subprocess.run([str(BIN / "actionlint"), "-no-color", *files], capture_output=True, text=True, timeout=120)


def _zizmor(*paths: Path) -> list[dict]:
    """zizmor's findings, its default persona, offline (no GitHub API calls)."""
    result = subprocess.run([str(BIN / "zizmor"), "--offline", "--format", "json", *map(str, paths)], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip(), result.stderr[-2000:]
    return json.loads(result.stdout)


def _workflow() -> dict:
    return yaml.safe_load((WORKFLOWS / "review.yml").read_text())


def test_the_workflows_pass_actionlint_and_zizmor_with_no_findings():
    lint = _actionlint(WORKFLOWS)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
    assert _zizmor(WORKFLOWS) == []


def test_the_linters_find_what_a_careless_workflow_does(tmp_path):
    # A tag instead of a commit, credentials left in the checkout, a fork's text run as code, a
    # trigger that runs with a write token, and a job that needs one that does not exist.
    (tmp_path / "bad.yml").write_text(
        "on: pull_request_target\n"
        "permissions: write-all\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-24.04\n"
        "    needs: nowhere\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
        "      - run: echo \"${{ github.event.pull_request.title }}\"\n"
    )
    assert "nowhere" in _actionlint(tmp_path).stdout
    audits = {f["ident"] for f in _zizmor(tmp_path / "bad.yml")}
    assert {"unpinned-uses", "artipacked", "template-injection", "dangerous-triggers"} <= audits


def test_every_action_is_pinned_by_a_full_commit_with_its_tag_named():
    text = (WORKFLOWS / "review.yml").read_text()
    uses = re.findall(r"uses: (\S+)@(\S+)(.*)", text)
    assert uses
    for action, ref, comment in uses:
        assert re.fullmatch(r"[0-9a-f]{40}", ref), action
        assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), (action, comment)


def test_no_job_holds_more_than_it_needs_and_no_checkout_keeps_its_token():
    wf = _workflow()
    assert wf["permissions"] == {}
    # YAML 1.1 reads the key `on` as true. Never pull_request_target: a fork's code never runs with a write token.
    assert set(wf[True]) == {"pull_request", "push"} and wf[True]["push"]["branches"] == ["main"]
    assert wf[True]["push"]["paths"] == wf[True]["pull_request"]["paths"]
    for name, job in wf["jobs"].items():
        assert set(job["permissions"]) <= {"contents", "security-events", "actions"}, name
        assert job["permissions"]["contents"] == "read", name
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, name
    # The jobs that run the change's code read the repository, nothing more (GitHub: upload-sarif needs
    # security-events: write); the one that writes security events checks out nothing and runs nothing.
    assert wf["jobs"]["review"]["permissions"] == wf["jobs"]["environments"]["permissions"] == {"contents": "read"}
    writers = [n for n, j in wf["jobs"].items() if j["permissions"].get("security-events") == "write"]
    assert writers == ["upload"]
    upload = wf["jobs"]["upload"]["steps"]
    assert not any("run" in s or s.get("uses", "").startswith("actions/checkout@") for s in upload)
    assert [s["uses"].split("@")[0] for s in upload] == ["actions/download-artifact", "github/codeql-action/upload-sarif"]


def test_each_environment_is_validated_synthesized_and_reviewed_against_the_base_with_the_make_targets():
    jobs = _workflow()["jobs"]
    job = jobs["review"]
    assert job["strategy"]["matrix"]["env"] == jobs["upload"]["strategy"]["matrix"]["env"] == "${{ fromJSON(needs.environments.outputs.names) }}"
    assert job["env"]["BASE_SHA"] == "${{ needs.environments.outputs.base }}"  # the listing's HEAD^1, never pull_request.base.sha
    assert "pull_request.base" not in (WORKFLOWS / "review.yml").read_text()
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "make install-synth" in runs
    assert '.venv/bin/hyperpod-cdk validate -c env="$ENV_NAME" && make synth ENV="$ENV_NAME" AGAINST="$BASE_SHA"' in runs
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^synth: install-synth$", makefile, re.M) and re.search(r"^install-synth:", makefile, re.M)
    assert "--against $(AGAINST)" in makefile
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # the base commit is synthesized from the history
    listing = next(s for s in jobs["environments"]["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert listing["with"]["fetch-depth"] == 2  # the merge commit and its parents


def test_the_sarif_goes_to_code_scanning_per_environment_from_the_job_that_runs_no_pr_code():
    jobs = _workflow()["jobs"]
    keep = next(s for s in jobs["review"]["steps"] if "upload-artifact" in s.get("uses", ""))
    assert keep["with"]["name"] == "review-${{ matrix.env }}" and "cdk.out/review-${{ matrix.env }}.sarif" in keep["with"]["path"]
    assert keep["if"].startswith("always()")  # a refused review's findings are the ones to see
    download, upload = jobs["upload"]["steps"]
    assert download["with"]["name"] == keep["with"]["name"]
    assert upload["with"]["category"].endswith("${{ matrix.env }}")
    assert upload["with"]["sarif_file"] == f"{download['with']['path']}/review-${{{{ matrix.env }}}}.sarif"
    condition = jobs["upload"]["if"]
    assert condition.startswith("always()") and "github.event_name == 'push'" in condition
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition  # a fork's token writes nothing
    assert jobs["upload"]["needs"] == ["environments", "review"]


def test_the_summary_is_cut_below_a_step_summarys_mebibyte_and_the_job_fails_exactly_when_the_review_refuses(tmp_path):
    job = _workflow()["jobs"]["review"]
    summary = next(s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", "") and "head -c" in s["run"])
    verdict = job["steps"][-1]
    review = next(s for s in job["steps"] if s.get("id") == "review")
    assert "set +e" in review["run"] and 'echo "status=${PIPESTATUS[0]}"' in review["run"]
    for size, truncated in ((1000, False), (3 * 1024 * 1024, True)):
        (tmp_path / "cdk.out").mkdir(exist_ok=True)
        (tmp_path / "cdk.out" / "review-dev.md").write_text("x" * size)
        out = tmp_path / "summary.md"
        out.write_text("")
        env = {"ENV_NAME": "dev", "BASE_SHA": "abc", "STATUS": "0", "GITHUB_STEP_SUMMARY": str(out), "PATH": "/usr/bin:/bin",
               "RUNNER_TEMP": str(tmp_path)}
        subprocess.run(["bash", "-e", "-c", summary["run"]], cwd=tmp_path, env=env, check=True)
        assert out.stat().st_size <= 1024 * 1024
        assert ("**Truncated**" in out.read_text()) == truncated
    for status, fails in (("0", False), ("1", True), ("2", True)):
        ran = subprocess.run(["bash", "-e", "-c", verdict["run"]], env={"STATUS": status, "ENV_NAME": "dev", "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True)
        assert (ran.returncode != 0) == fails, status
