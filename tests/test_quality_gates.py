"""The bars every environment must clear: what `cdk synth` refuses, cdk-nag and cfn-lint."""

from __future__ import annotations

import json

import pytest

from cli.review import report as review
from infra import chart, validation
from tests.conftest import GATED, gated_templates


@pytest.mark.parametrize("env", GATED)
def test_no_unacknowledged_nag_errors_in_either_pack(synth, env):
    nag = review.load_nag(synth(env).outdir)
    assert nag.errors == []


@pytest.mark.parametrize("env", GATED)
def test_both_nag_packs_ran(synth, env):
    names = {p["pluginName"] for p in synth(env).report["pluginReports"]}
    assert set(review.PACK_NAMES) <= names


@pytest.mark.parametrize("env", GATED)
def test_every_acknowledgment_is_scoped_and_gives_a_specific_reason(synth, env):
    nag = review.load_nag(synth(env).outdir)
    assert nag.acknowledged
    manifest = json.loads((synth(env).outdir / "manifest.json").read_text())
    stages = {a.removeprefix("assembly-") for a, v in manifest["artifacts"].items() if v["type"] == "cdk:cloud-assembly"}
    support = {v.get("displayName") for v in manifest["artifacts"].values() if v["type"] == "aws:cloudformation:stack"}
    for pack, rule, path, reason in nag.acknowledged:
        assert len(reason) >= 40, (rule, path, reason)
        # Below one stack: this environment's, a pipeline stage's environment's, or the pipeline's support stack.
        top, below = path.split("/", 1)
        if top in stages:
            assert below.startswith(f"hyperpod-{top}-"), path
        elif top not in support or not top.startswith("cross-region-stack-"):
            assert path.startswith(f"hyperpod-{synth(env).settings.env_name}-"), path


def _lint(job: tuple[str, list[str], str]) -> list:
    """cfn-lint over some stacks of one assembly, in a worker process, through the review's cache."""
    from pathlib import Path

    outdir, names, cache = Path(job[0]), job[1], Path(job[2])
    return review.lint(outdir, [s for s in review.load_stacks(outdir) if s.name in names], cache)


@pytest.fixture(scope="session")
def lint_findings(synth, lint_cache) -> dict:
    """cfn-lint of every gated config, two at a time (cfn-lint is pure Python: a process per core);
    a capability's templates that equal dev's are dev's findings."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = {
        name: (str(synth(name).outdir), [synth(name).settings.stack_name(k) for k in gated_templates(synth, name)], str(lint_cache))
        for name in GATED
    }
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(zip(jobs, pool.map(_lint, jobs.values())))


@pytest.mark.parametrize("env", GATED)
def test_cfn_lint_finds_no_errors_and_only_accepted_warnings(lint_findings, env):
    findings = lint_findings[env]
    assert [f for f in findings if f.level == "error"] == []
    assert [f for f in findings if not f.accepted and f.level != "info"] == []


def test_review_lists_stacks_in_deploy_order(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    text = review.to_markdown(report)
    assert report["pass"]
    assert text.index("hyperpod-dev-network") < text.index("hyperpod-dev-cluster")


# ------------------------------------------------------------------ the user's path: `cdk synth`

# A type aws-cdk-lib's CloudFormation validator lists in no region; the every-option config has a group of it.
GB200 = "ml.p6e-gb200.36xlarge"


# Every optional instance-group field, each set in some group: cluster-options' groups (custom
# AMI, Spot/On-Demand, minimum count, scheduled updates, auto-patching, an AMI release pin,
# flexible types, a training plan, labels and taints), and beside them threads per core, a
# volume size, explicit deep health checks, a rollback batch, an autoscaled group (Karpenter)
# and a MIG group on EFA only.
def _every_group_option() -> dict:
    from infra.config import deep_merge
    from tests.conftest import CAPABILITIES

    groups = json.loads(json.dumps(CAPABILITIES["cluster-options"]["hyperpod"]["instance_groups"]))
    groups[0].update({"threads_per_core": 2, "ebs_volume_gb": 600})
    groups[0]["scheduled_update"]["rollback_batch"] = {"unit": "instances", "value": 1}
    groups[1]["deep_health_checks"] = []
    groups += [
        {"name": "scaled", "instance_type": "ml.g5.8xlarge", "count": 0, "autoscaled": True, "max_count": 2},
        {"name": "sliced", "instance_type": "ml.p5.48xlarge", "count": 1, "mig_profile": "all-1g.10gb",
         "network_interface": "efa-only", "deep_health_checks": ["InstanceStress"], "availability_zone": "us-east-1b"},
        # A type aws-cdk-lib's CloudFormation validator lists in no region (E3644: its per-region
        # lists predate it), while botocore's ClusterInstanceType has it: whether a region offers a
        # type is preflight's question, so validate and cdk synth both pass it.
        {"name": "gb200", "instance_type": GB200, "count": 1},
    ]
    return deep_merge(CAPABILITIES["cluster-options"], {"hyperpod": {"autoscaling": "karpenter", "instance_groups": groups}})


def _cfn_validate(outdir) -> set:
    """CDK's own CloudFormation validator's results in an assembly: what it found, acknowledged or not."""
    report = json.loads((outdir / "validation-report.json").read_text())
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "CloudFormation Validate"]
    return {
        (kind, v["ruleName"], v["description"], c["constructPath"])
        for kind in ("violations", "suppressedViolations")
        for v in plugin.get(kind, [])
        for c in v["violatingConstructs"]
    }


def test_cdk_synth_validate_and_the_tests_synthesis_agree_on_every_instance_group_option(synth, tmp_path, monkeypatch, capsys):
    # The pinned CDK CLI (node_modules, as bin/cdk and make synth run it) on a folder whose
    # cdk.json carries the config, all stacks, and the in-process synthesis the tests and
    # `hyperpod-cdk review` use: the same stacks, the same verdict, the same findings of CDK's
    # CloudFormation validator (cdk.json's @aws-cdk/core:validateAgainstDefaultRules). The one
    # CLI run of the gates (about 15 s), beside the in-process one; and what a fresh clone's
    # `cdk synth` does whatever the environment: no credentials, no lookups, jsii on the venv's Node,
    # and, with no prepared chart, the line that says deploy will stop and the rule that stops it.
    # (The default environment goes through the CLI in tests/test_workflows.py's make synth.)
    import subprocess

    from cli import main as hyperpod_cdk
    from cli.synth import SynthRefused, cdk_cli
    from infra.config import InstanceGroup
    from tests.conftest import cdk_project, patched_context

    patch = _every_group_option()
    settings, _ = validation.load_settings(patched_context("dev", patch), "dev")
    optional = {name for name, f in InstanceGroup.model_fields.items() if not f.is_required()}
    assert optional <= set().union(*(g.model_fields_set for g in settings.hyperpod.instance_groups))
    project = cdk_project(patched_context("dev", patch), tmp_path / "project")
    command, env = cdk_cli()
    cli = subprocess.Popen([*command, "synth", "--quiet", "-o", str(project / "out")], cwd=project, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ours, refused = synth("dev", patch), []
    except SynthRefused as err:
        ours, refused = None, err.problems
    _, stderr = cli.communicate(timeout=300)
    assert (cli.returncode != 0) == bool(refused), (refused, stderr[-3000:])
    # What upgrade-plan and preflight tell operators to set (image_release_version) deploys.
    assert cli.returncode == 0, stderr[-3000:]
    assert "missing" not in json.loads((project / "out" / "manifest.json").read_text())  # no context lookups: no credentials
    assert "end-of-life" not in stderr  # jsii runs on the venv's Node 24
    if not chart.is_prepared(settings.hyperpod.helm_chart.revision):
        assert "deploy will stop: the HyperPod dependencies chart" in stderr and "run `make hyperpod-chart ENV=dev`" in stderr
        for name in (settings.stack_name(k) for k in ours.templates):
            assert "HyperPodChartPrepared" in json.loads((project / "out" / f"{name}.template.json").read_text())["Rules"]
    manifest = lambda outdir: sorted(  # noqa: E731
        name for name, a in json.loads((outdir / "manifest.json").read_text())["artifacts"].items() if a["type"] == "aws:cloudformation:stack"
    )
    assert manifest(project / "out") == manifest(ours.outdir) == sorted(settings.stack_name(k) for k in ours.templates)
    assert _cfn_validate(project / "out") == _cfn_validate(ours.outdir)
    # The validator's finding on the GB200 group is there, and acknowledged, not a refusal.
    assert any(kind == "suppressedViolations" and GB200 in description for kind, _, description, _ in _cfn_validate(ours.outdir))
    monkeypatch.chdir(project)
    assert hyperpod_cdk.main(["validate", "-c", "env=dev"]) == 0, capsys.readouterr().err


def test_what_cdks_validator_refuses_fails_the_synthesis_and_the_review(tmp_path):
    # CDK's bundled validator (aws-cdk-lib 2.275) knows no ImageReleaseVersion: without the
    # acknowledgment a pinned release fails synthesis (as `cdk synth` exits 1), and the review of
    # such an assembly fails too; with it, the finding is suppressed on that construct alone with
    # a reason naming the schema that has the property.
    import aws_cdk as cdk
    from aws_cdk import aws_sagemaker as sagemaker

    from cli.synth import CLI_CONTEXT
    from infra import cfn_schema, compliance
    from tests.conftest import CONTEXT

    def assembly(acknowledged: bool, outdir):
        flags = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
        app = cdk.App(outdir=str(outdir), context={**flags, **CLI_CONTEXT})
        stack = cdk.Stack(app, "Pinned", env=cdk.Environment(account="111111111111", region="us-east-1"))
        cluster = sagemaker.CfnCluster(stack, "Cluster", cluster_name="pinned", instance_groups=[{
            "instanceGroupName": "g", "instanceType": "ml.m5.4xlarge", "instanceCount": 1, "executionRole": "arn:aws:iam::111111111111:role/r",
            "lifeCycleConfig": {"sourceS3Uri": "s3://b/l", "onCreate": "on_create.sh"}, "imageReleaseVersion": "1.0.0"}],
            orchestrator={"eks": {"clusterArn": "arn:aws:eks:us-east-1:111111111111:cluster/c"}})
        if acknowledged:
            compliance.acknowledge_newer_schema(cluster, "F3002", "ImageReleaseVersion", "AWS::SageMaker::Cluster")
        app.synth()
        return outdir

    refused = review.load_refusals(assembly(False, tmp_path / "refused"))
    assert [(r.plugin, r.rule, r.construct) for r in refused] == [("CloudFormation Validate", "F3002", "Pinned/Cluster")]
    assert "ImageReleaseVersion" in refused[0].description
    report = review.build(tmp_path / "refused", with_lint=False, with_cdk_diff=False)
    assert not report["pass"] and "ImageReleaseVersion" in report["refused"][0]
    from cli.review import sarif

    assert [f["ruleId"] for f in sarif.findings(report) if f["level"] == "error"] == ["cdk-synth/refused"]
    assert review.load_refusals(assembly(True, tmp_path / "acknowledged")) == []
    (suppressed,) = [v for p in json.loads((tmp_path / "acknowledged/validation-report.json").read_text())["pluginReports"]
                     if p["pluginName"] == "CloudFormation Validate" for v in p["suppressedViolations"]]
    assert suppressed["acknowledgedAt"] == "Pinned/Cluster" and cfn_schema.source("AWS::SageMaker::Cluster") in suppressed["reason"]
    # That schema file is the one that has the property.
    assert "ImageReleaseVersion" in cfn_schema.definition("AWS::SageMaker::Cluster", "ClusterInstanceGroup")["properties"]
