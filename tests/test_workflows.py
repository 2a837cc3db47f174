"""The pull-request workflow (.github/workflows/review.yml): linted by actionlint and zizmor (both
from PyPI, offline) with no findings, and held to what the review needs: each environment of
cdk.json and of the base's, the make targets the tests run, the merge ref's first parent as
baseline, SARIF per environment uploaded by a job that runs none of the change's code. Its own
`run:` lines run here against a real merge commit, as GitHub's runner runs them."""

from __future__ import annotations

import json
import os
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


# -- the workflow's own run lines, against real branches ----------------------------------------


def _step(job: str, name: str) -> dict:
    """A step of a job, by its id or name."""
    return next(s for s in _workflow()["jobs"][job]["steps"] if name in (s.get("id"), s.get("name")))


def _run_step(step: dict, cwd: Path, runner: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    """A step's `run:` as GitHub's runner runs it (bash --noprofile --norc -eo pipefail on a file, the step's
    env, GITHUB_OUTPUT and GITHUB_STEP_SUMMARY files): (the run, its outputs, its summary)."""
    script, output, summary = runner / "step.sh", runner / "output", runner / "summary.md"
    script.write_text(step["run"])
    output.write_text("")
    summary.write_text("")
    env = {**os.environ, **step.get("env", {}), "RUNNER_TEMP": str(runner), "GITHUB_OUTPUT": str(output),
           "GITHUB_STEP_SUMMARY": str(summary), **env}
    ran = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=900)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return ran, outputs, summary.read_text()


@pytest.fixture(scope="module")
def pull_request(tmp_path_factory):
    """A clone whose main moved on after a pull request's branch left it, and the pull request's merge ref
    as GitHub makes it (a merge commit, main's tip its first parent), checked out as the workflow's
    checkout leaves it. Main has dev in the second account (this change moves it back), `old` (this change
    removes it) and no prod (this change adds it); the branch point still had `stale`, which main removed
    since (pull_request.base.sha would still see it). The change also adds `broken`, a config validate refuses."""
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed here (it is on GitHub's runners)")
    clone = tmp_path_factory.mktemp("pull-request") / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for shared in (".venv", "node_modules"):
        (clone / shared).symlink_to(ROOT / shared)
    git = ["git", "-C", str(clone), "-c", "user.name=reviewer", "-c", "user.email=reviewer@example.com"]

    def commit(environments: dict, message: str) -> str:
        doc = json.loads((ROOT / "cdk.json").read_text())
        doc["context"]["environments"] = environments
        (clone / "cdk.json").write_text(json.dumps(doc, indent=2) + "\n")
        subprocess.run([*git, "commit", "-q", "-am", message], check=True)
        return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    envs = CONTEXT["environments"]
    moved = {**envs["dev"], "account": "222222222222"}
    subprocess.run([*git, "checkout", "-q", "-B", "main"], check=True)
    fork = commit({"dev": moved, "old": moved, "stale": moved}, "main as the branch left it")
    base = commit({"dev": moved, "old": moved}, "main moves on")
    subprocess.run([*git, "checkout", "-q", "-b", "change", fork], check=True)
    broken = {**envs["dev"], "network": {**envs["dev"].get("network", {}), "nat_gateways": 4}}
    head = commit({**envs, "broken": broken}, "the change")
    merge = subprocess.run([*git, "commit-tree", f"{head}^{{tree}}", "-p", base, "-p", head, "-m", "Merge change into main"],
                           capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*git, "checkout", "-q", "--detach", merge], check=True)
    # What `make install` leaves: the installs (shared, linked) newer than the files they were made from, so
    # make synth's install-synth has nothing to do and never re-points the shared install at this clone.
    for tracked in subprocess.run([*git, "ls-files"], capture_output=True, text=True, check=True).stdout.splitlines():
        os.utime(clone / tracked, (0, 0))
    assert subprocess.run(["make", "-q", "install-synth"], cwd=clone).returncode == 0, "the shared .venv or node_modules is stale"
    return clone, {"fork": fork, "base": base, "head": head}


def test_the_listing_takes_the_merge_refs_first_parent_and_the_environments_of_both_sides(pull_request, tmp_path):
    clone, commits = pull_request
    ran, outputs, _ = _run_step(_step("environments", "list"), clone, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert outputs["base"] == commits["base"] != commits["fork"]  # not the branch point: stale is not listed
    assert json.loads(outputs["names"]) == ["broken", "dev", "old", "prod"]
    # Bounded: more environments than the workflow runs review jobs for fail the listing, with the reason.
    ran, outputs, summary = _run_step(_step("environments", "list"), clone, tmp_path, MAX_ENVIRONMENTS="3")
    assert ran.returncode == 1 and outputs == {}
    assert "::error file=cdk.json::4 environments here and at the base, more than the 3 review jobs" in ran.stdout
    assert "more than MAX_ENVIRONMENTS (3)" in summary
    # A cdk.json the listing cannot read fails it, with jq's reason in the summary.
    committed = (clone / "cdk.json").read_text()
    try:
        (clone / "cdk.json").write_text(committed[:-40])
        ran, outputs, summary = _run_step(_step("environments", "list"), clone, tmp_path)
    finally:
        (clone / "cdk.json").write_text(committed)
    assert ran.returncode == 1 and outputs == {} and "::error file=cdk.json::cdk.json's environments cannot be listed: " in ran.stdout
    assert summary.startswith("## cdk.json is refused\n\n```\nparse error: ")


def _review_job(clone: Path, runner: Path, env: str, base: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    """The review job's run lines for `env` after its install step: the review, its summary, the verdict."""
    (clone / "cdk.out" / f"review-{env}.md").unlink(missing_ok=True)
    ran, outputs, _ = _run_step(_step("review", "review"), clone, runner, ENV_NAME=env, BASE_SHA=base)
    assert ran.returncode == 0 and "status" in outputs, ran.stderr  # set +e: the status is an output
    status = outputs["status"]
    shown, _, summary = _run_step(_step("review", "the review in the job summary"), clone, runner, ENV_NAME=env, BASE_SHA=base,
                                  STATUS=status)
    assert shown.returncode == 0, shown.stderr
    verdict, _, _ = _run_step(_step("review", "the verdict"), clone, runner, ENV_NAME=env, STATUS=status)
    assert (verdict.returncode == 0) == (status == "0")
    return ran, outputs, summary


def test_an_environment_the_change_removes_is_reviewed_as_left_behind(pull_request, tmp_path):
    clone, commits = pull_request
    ran, outputs, summary = _review_job(clone, tmp_path, "old", commits["base"])
    assert outputs["status"] == "0", ran.stdout
    assert summary.startswith(f"# old against {commits['base']} ({commits['base'][:12]}): not in this change's cdk.json, 1 to stop at")
    assert (f"- **ENVIRONMENT LEFT BEHIND**: old is in the cdk.json of {commits['base']} ({commits['base'][:12]}) and not in this "
            "change's (removed or renamed): its stacks stay deployed in aws://222222222222/us-east-1 and nothing deploys them "
            "(hyperpod-old-network, ") in summary
    # Its SARIF result stands where environments are written in cdk.json.
    (result,) = json.loads((clone / "cdk.out" / "review-old.sarif").read_text())["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert result["ruleId"] == "change/environment-left-behind"
    assert (clone / "cdk.json").read_text().splitlines()[region["startLine"] - 1].strip() == '"environments": {'


def test_a_config_error_reaches_the_job_summary(pull_request, tmp_path):
    clone, commits = pull_request
    ran, outputs, summary = _review_job(clone, tmp_path, "broken", commits["base"])
    assert outputs["status"] == "2"
    assert summary.startswith("## broken: no review was written (exit status 2)")
    assert "error: broken: network.nat_gateways" in summary


def test_an_environment_in_another_account_at_the_base_is_reviewed_as_a_first_deploy_by_make_synth(pull_request, tmp_path,
                                                                                                   lint_cache):
    # The one run of the real make synth path here: cdk synth through the pinned CLI, then the review.
    from tests.conftest import review_outdir

    clone, commits = pull_request
    review_outdir(clone / "cdk.out", lint_cache)
    ran, outputs, summary = _review_job(clone, tmp_path, "dev", commits["base"])
    assert outputs["status"] == "0", ran.stdout[-3000:]
    # make synth read the base beside cdk synth (here from the base's cdk.json alone: dev is elsewhere there).
    assert "reviewed as a first deploy" in (clone / "cdk.out" / "baseline-dev.log").read_text()
    assert (f"## First deploy\n\nNote: {commits['base']} ({commits['base'][:12]}) deploys dev to aws://222222222222/us-east-1, "
            "this config to aws://111111111111/us-east-1: nothing of it is deployed there; reviewed as a first deploy.") in summary
    # What stays in the account it leaves: a callout to stop at, its result on the account line the change wrote.
    assert summary.startswith(f"# dev as a first deploy where it moves: PASS, 1 to stop at")
    assert ("- **ENVIRONMENT MOVED**: dev moves from aws://222222222222/us-east-1 to aws://111111111111/us-east-1 (account): "
            "this is a first deploy there") in summary
    assert "hyperpod-dev-cluster" in summary.split("**ENVIRONMENT MOVED**", 1)[1].split("\n", 1)[0]
    assert "## Estimated deploy plan" in summary
    (result,) = [r for r in json.loads((clone / "cdk.out" / "review-dev.sarif").read_text())["runs"][0]["results"]
                 if r["ruleId"] == "change/environment-moved"]
    # dev's account is now defaults' (its own line removed, which the pull request did not write): the result stands
    # on the nearest line it did write, and says where the field is.
    from cli.review import sarif

    line = result["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert result["properties"]["inline"] is True and line in sarif.changed_lines(clone, commits["base"])
    assert "(shown at the nearest line this change writes; the field is at line" in result["message"]["text"]


def test_a_baseline_make_synth_cannot_read_stops_it_with_the_reviews_own_error_line(pull_request):
    # The CDK CLI stood in by `true` (a synthesis that succeeds at once): what stops make synth is the baseline
    # read beside it, its error said whole, and no review runs after it.
    clone, _ = pull_request
    done = subprocess.run(["make", "-o", "install-synth", "synth", "ENV=dev", "AGAINST=no-such-revision", "CDK=true"], cwd=clone,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(clone)})
    assert done.returncode != 0
    assert ("error: --against no-such-revision: neither a git revision, an assembly folder nor a template file"
            in done.stderr.splitlines()), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (clone / "cdk.out" / "review-dev.md").exists()


def test_a_config_cdk_synth_and_the_baseline_both_refuse_is_said_once_by_make_synth(pull_request):
    # `broken` (validate refuses it): the real cdk synth says why and stops make synth; the baseline read beside it
    # refuses the same config, and its lines stay in its log rather than saying it all again.
    clone, commits = pull_request
    done = subprocess.run(["make", "-o", "install-synth", "synth", "ENV=broken", f"AGAINST={commits['base']}"], cwd=clone,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(clone)})
    assert done.returncode != 0
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error: ")]
    assert errors and len(errors) == len(set(errors)), errors
    assert "error: broken:" in (clone / "cdk.out" / "baseline-broken.log").read_text()


def test_an_environment_the_base_lacks_is_reviewed_as_a_first_deploy(pull_request, synth, tmp_path, lint_cache, monkeypatch,
                                                                     capsys):
    # The review the workflow's make synth ends in, of the session's synthesis of prod, against the base.
    from cli import main as cli
    from tests.conftest import review_outdir

    clone, commits = pull_request
    monkeypatch.chdir(clone)
    review_outdir(tmp_path, lint_cache)
    assert cli.main(["review", "--env", "prod", "--assembly", str(synth("prod").outdir), "--against", commits["base"],
                     "--outdir", str(tmp_path)]) == 0
    note = (f"{commits['base']} ({commits['base'][:12]}) has no environment prod in its cdk.json: this change adds it: nothing of "
            "it is deployed there; reviewed as a first deploy")
    assert f"note: {note}" in capsys.readouterr().err
    assert f"## First deploy\n\nNote: {note}." in (tmp_path / "review-prod.md").read_text()
    assert json.loads((tmp_path / "review-prod.json").read_text())["first_deploy"] == note


def test_the_bases_synthesis_is_kept_between_runs_under_what_the_reviews_baseline_key_covers():
    # cli/revision.py baseline_key: the base's tree (its commit), the environment, the synthesizing libraries and
    # Python's version (setup-python's, fixed); the review keeps baselines in cli/main.py BASELINE_CACHE under cdk.out.
    from cli.main import BASELINE_CACHE

    steps = _workflow()["jobs"]["review"]["steps"]
    names = [s.get("name") for s in steps]
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    assert restore["with"]["path"] == save["with"]["path"] == f"cdk.out/{BASELINE_CACHE}"
    key = restore["with"]["key"]
    for part in ("matrix.env", "needs.environments.outputs.base", "'pyproject.toml'", "'package-lock.json'"):
        assert part in key
    assert save["with"]["key"] == "${{ steps.baseline.outputs.cache-primary-key }}" and restore["id"] == "baseline"
    # restored before the review reads it, saved after it whatever the verdict, and only where something new was made
    assert names.index(restore["name"]) < names.index("validate, synth and review against the base") < names.index(save["name"])
    assert save["if"].startswith("always() && steps.baseline.outputs.cache-hit != 'true'")
    # make synth keeps the review's cache when it clears cdk.out
    assert "! -name 'review-cache'" in (ROOT / "Makefile").read_text()


def test_several_environments_get_the_fleets_table_in_a_summary_of_its_own(pull_request, tmp_path):
    clone, _ = pull_request
    job = _workflow()["jobs"]["fleet"]
    assert job["needs"] == ["environments", "review"] and "contains(needs.environments.outputs.names, ',')" in job["if"]
    assert job["permissions"] == {"contents": "read"}
    ran, _, summary = _run_step(_step("fleet", "the table in the job summary"), clone, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert summary.startswith("## The fleet\n\n```\nenvironment  verdict")
    rows = {line.split()[0]: line for line in summary.splitlines()[4:] if line and not line.startswith((" ", "-", "`"))
            and ":" not in line.split()[0]}
    # A row each, the config validate refuses among them; none wider than the table's 120 columns.
    assert {"broken", "dev", "prod"} <= set(rows) and rows["broken"].split()[1] == "refused"
    assert max(len(line) for line in summary.splitlines()) <= 120
