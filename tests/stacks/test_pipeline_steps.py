"""The pipeline's check steps run here as CodeBuild runs them: each step's install and build
commands, read from the synthesized delivery stack's buildspec, in one shell per phase, in a
source folder with the Synth step's output linked in by CDK Pipelines' own command, against a
Stage assembly whose HyperPod chart is prepared (a stand-in chart folder, as `make
hyperpod-chart` leaves one). The AWS CLI is tests/stacks/fake_aws.py: each call held to botocore's
model, answered from "deployed" templates.

What it proves: the approver reads exactly what deploys. A no-op run reviews as no change; the run
that takes over a hand deploy (one GPU node fewer) lists exactly the resources whose templates
differ (what CloudFormation's change set compares); preflight takes the review's deploy plan instead of synthesizing; the protect step
protects what the assembly protects.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stacks import delivery
from tests.conftest import CAPABILITIES, FLEETS, ROOT, patched_context

FAKE_AWS = Path(__file__).with_name("fake_aws.py")
# The tests' fleet with one wave of dev, the pipeline in its tooling account.
BLOCK = {**CAPABILITIES["delivery"]["delivery"], "waves": [["dev"]], "protected": []}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """(the synthesized assembly, the delivery template, the context) with a prepared chart stand-in."""
    from infra import chart
    from tests.conftest import _synthesize

    where = tmp_path_factory.mktemp("pipeline")
    context = patched_context("dev", {"delivery": BLOCK}, FLEETS["delivery"])
    revision = context["defaults"]["hyperpod"]["helm_chart"]["revision"]
    prepared = chart.prepared_dir(revision, where / "build")
    prepared.mkdir(parents=True)
    (prepared / "Chart.yaml").write_text("apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n")
    (prepared / chart.MARKER).write_text("{}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chart, "PREPARED_ROOT", where / "build")
        s = _synthesize(context, "dev", where / "cdk.out")
    return s, context


def _buildspec(s, step: str) -> dict:
    (pipe,) = s.resources("delivery", "AWS::CodePipeline::Pipeline").values()
    action = next(a for st in pipe["Properties"]["Stages"] for a in st["Actions"] if a["Name"].split(".")[-1] == step)
    source = s.templates["delivery"]["Resources"][action["Configuration"]["ProjectName"]["Ref"]]["Properties"]["Source"]["BuildSpec"]
    # The reviews bucket's name is a reference: the bucket this test stands in.
    text = source if isinstance(source, str) else "".join(p if isinstance(p, str) else "reviews-bucket" for p in source["Fn::Join"][1])
    return json.loads(text)


def _source_folder(where: Path, context: dict) -> Path:
    """The Source artifact as CodeBuild unpacks it: this checkout's files (links), with the
    pipeline's cdk.json."""
    where.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("cdk.out", "cdk.json", ".git"):
            (where / entry.name).symlink_to(entry)
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    (where / "cdk.json").write_text(json.dumps({**cdk_json, "context": context}))
    return where


def _run_step(spec: dict, src: Path, env: dict) -> subprocess.CompletedProcess:
    """Every phase's commands in one bash each, stopping at the first that fails (buildspec 0.2)."""
    script = []
    for phase in ("install", "pre_build", "build"):
        for command in spec["phases"].get(phase, {}).get("commands", []):
            script += [command, 'rc=$?; [ "$rc" -eq 0 ] || exit "$rc"']
    return subprocess.run(["bash", "-c", "\n".join(script)], cwd=src, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def codebuild(pipeline, tmp_path_factory, lint_cache):
    """Run one step of the pipeline: (step name, deployed templates) -> (result, source folder, fake S3, AWS calls)."""
    from cli.synth import cdk_cli
    from tests.conftest import review_outdir

    s, context = pipeline
    tmp_path = tmp_path_factory.mktemp("codebuild")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    aws = bin_dir / "aws"
    aws.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_AWS} \"$@\"\n")
    aws.chmod(aws.stat().st_mode | stat.S_IEXEC)
    _, base_env = cdk_cli()
    runs: list[str] = []

    def run(step: str, deployed: dict[str, dict]):
        runs.append(step)
        step = f"{step}-{len(runs)}"
        src = _source_folder(tmp_path / step / "src", context)
        # The step's `make install-synth` finds this checkout's install current, as CodeBuild's finds its own
        # fresh one: never an install into the shared .venv from a temporary folder.
        assert subprocess.run(["make", "-q", "install-synth"], cwd=src, capture_output=True).returncode == 0, \
            "the checkout's .venv or node_modules is stale: run make install-synth"
        review_outdir(src / delivery.REVIEW_DIR, lint_cache)
        (tmp_path / step / "deployed").mkdir()
        for name, template in deployed.items():
            (tmp_path / step / "deployed" / f"{name}.json").write_text(json.dumps(template))
        env = {**base_env, "PATH": f"{bin_dir}:{base_env['PATH']}", "CODEBUILD_SRC_DIR_Synth_Output": str(s.outdir),
               "CODEBUILD_RESOLVED_SOURCE_VERSION": "0123456789abcdef0123456789abcdef01234567",
               "FAKE_AWS_DEPLOYED": str(tmp_path / step / "deployed"), "FAKE_AWS_S3": str(tmp_path / step / "s3"),
               "FAKE_AWS_CALLS": str(tmp_path / step / "calls.jsonl")}
        done = _run_step(_buildspec(s, runs[-1]), src, env)
        calls = [json.loads(line) for line in (tmp_path / step / "calls.jsonl").read_text().splitlines()]
        return done, src, tmp_path / step / "s3", calls

    return run


def _stage_templates(s) -> dict[str, dict]:
    folder = s.outdir / "assembly-dev"
    manifest = json.loads((folder / "manifest.json").read_text())
    return {a["properties"]["stackName"]: json.loads((folder / a["properties"]["templateFile"]).read_text())
            for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}


@pytest.fixture(scope="module")
def no_op(pipeline, codebuild):
    """The review step of a run that deploys what the last run deployed: this very assembly."""
    deployed = _stage_templates(pipeline[0])
    return deployed, *codebuild("Review-dev", deployed)


def _change_set(deployed: dict[str, dict], s) -> set[tuple[str, str]]:
    """(stack, logical ID) of each resource a change set would add, remove or modify: CloudFormation compares
    each resource's definition; its Metadata (construct paths, nag acknowledgments) is not a property. Left
    out as the review leaves it out (cli/review/changes.py IGNORED_TYPES): CDK's version-reporting
    AWS::CDK::Metadata, which deploys nothing and which every takeover modifies."""
    def deployable(resource):
        return {k: v for k, v in resource.items() if k != "Metadata"} if resource else None

    def resources(template):
        return {lid: r for lid, r in template.get("Resources", {}).items() if r["Type"] != "AWS::CDK::Metadata"}

    return {(name, lid) for name, t in _stage_templates(s).items()
            for lid in set(resources(t)) | set(resources(deployed.get(name, {})))
            if deployable(resources(deployed.get(name, {})).get(lid)) != deployable(resources(t).get(lid))}


def test_a_no_op_run_reviews_the_stages_own_assembly_as_no_change(no_op):
    deployed, done, src, s3, calls = no_op
    assert done.returncode == 0, done.stderr[-2000:]
    assert "No resource changes." in done.stdout
    report = json.loads((src / "review" / "review-dev.json").read_text())
    assert report["assembly"] == "cdk.out/assembly-dev"  # the Synth step's, not a synthesis of its own
    assert not any(w.startswith("deploy will stop") for w in report["warnings"])  # the prepared chart
    # Each deployed stack read under the target's lookup role, then the review kept by commit for the approver.
    gets = [c for c in calls if c["args"][:2] == ["cloudformation", "get-template"]]
    assert sorted(c["args"][c["args"].index("--stack-name") + 1] for c in gets) == sorted(deployed)
    assert all(c["key"].startswith("ASIAFAKE") for c in gets)
    kept = s3 / "reviews-bucket" / "reviews" / "dev" / "0123456789abcdef0123456789abcdef01234567"
    assert sorted(p.name for p in kept.iterdir()) == ["review-dev.json", "review-dev.md", "review-dev.sarif"]


def test_preflight_takes_the_reviews_deploy_plan_and_the_sessions_real_expiry(pipeline, no_op, tmp_path):
    from datetime import datetime, timezone

    from botocore.credentials import EnvProvider

    from cli.preflight.session import check_session, deploy_time

    _, context = pipeline
    _, done, src, _, _ = no_op
    # The preflight step's cdk.out is the review step's output folder.
    found = deploy_time(src / "review", context, "dev", synthesize=lambda *a: pytest.fail("synthesized"), pipeline=True)
    report = json.loads((src / "review" / "review-dev.json").read_text())
    # This change's minutes against what the environment has deployed: none for a no-op.
    assert (found.minutes, found.by_pipeline) == (report["changes"]["update_plan"]["minutes"], True) == (0, True)
    # The assumed role's credentials as the step exports them: botocore reads their expiry.
    exported = {"AWS_ACCESS_KEY_ID": "ASIAFAKE", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t",
                "AWS_CREDENTIAL_EXPIRATION": "2026-12-07T18:00:00+00:00"}
    credentials = EnvProvider(environ=exported).load()
    result = check_session(credentials, found, now=datetime(2026, 12, 7, 17, 30, tzinfo=timezone.utc))
    assert result.status == "pass" and "expires at 18:00 UTC" in result.detail and "deploys under its own roles" in result.detail
    assert deploy_time(tmp_path, context, "dev", pipeline=True).startswith("the pipeline's review step handed no review")


def test_the_preflight_step_runs_with_the_review_steps_files_as_its_cdk_out(pipeline):
    s, _ = pipeline
    spec = _buildspec(s, "Preflight-dev")
    link = next(c for c in spec["phases"]["install"]["commands"] if "CODEBUILD_SRC_DIR_" in c)
    assert '"cdk.out"' in link and "Review" in link  # CDK Pipelines' link of the review step's output
    assert spec["phases"]["build"]["commands"][-1] == ".venv/bin/hyperpod-cdk preflight -c env=dev --pipeline"
    assert "AWS_CREDENTIAL_EXPIRATION=$(echo \"$creds\" | cut -f4)" in "\n".join(spec["phases"]["build"]["commands"])


def test_the_first_run_after_a_hand_deploy_lists_exactly_what_the_change_set_changes_and_replaces_nothing(pipeline, codebuild):
    # dev deployed by hand (`cdk deploy --all`: the App's own stacks, synthesized beside the delivery stack) with
    # two GPU nodes, then taken over by its stage at this commit's one: the review of the stage's assembly lists
    # every resource the Stage changes, what CloudFormation's change set compares (each resource's definition
    # against the deployed one), the node count among them.
    s, _ = pipeline
    by_hand = {s.settings.stack_name(k): t for k, t in s.templates.items() if k != "delivery"}
    hyperpod = by_hand["hyperpod-dev-hyperpod"]
    (cluster_id,) = [lid for lid, r in hyperpod["Resources"].items() if r["Type"] == "AWS::SageMaker::Cluster"]
    gpu = next(g for g in hyperpod["Resources"][cluster_id]["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "gpu")
    gpu["InstanceCount"] = 2
    done, src, _, _ = codebuild("Review-dev", by_hand)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((src / "review" / "review-dev.json").read_text())
    differing = _change_set(by_hand, s)
    assert ("hyperpod-dev-hyperpod", cluster_id) in differing  # and construct paths in Name tags, descriptions, prune labels
    assert {(c["stack"], c["resource"]) for c in report["changes"]["changes"]} == differing
    assert {c["action"] for c in report["changes"]["changes"]} == {"modified"}
    assert "instance group gpu in hyperpod-dev-hyperpod goes from 2 to 1 node(s)" in done.stdout
    assert "Stack dev/hyperpod-dev-hyperpod" in report["changes"]["cdk_diff"]["hyperpod-dev-hyperpod"]
    # The one thing to stop at is the node count: no replacement, nothing removed.
    assert report["changes"]["callouts"] == ["NODE COUNT: instance group gpu in hyperpod-dev-hyperpod goes from 2 to 1 node(s)"]
