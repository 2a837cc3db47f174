"""What a platform team's reviewers run on the synthesized output: checkov on every
template and on the job manifest, a least-privilege walk over IAM, and prod data safety."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from infra import validation
from cli.review import report as review
from cli.review import iam_audit
from manifests import job as job_manifest
from infra.naming import STACK_SUFFIXES
from tests.conftest import CONTEXT, ENVIRONMENTS, GATED, ROOT, gated_templates

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def _checkov(folder, *args: str) -> dict:
    """checkov's reports over `folder`, scanned from inside it: checkov 3.3 leaves each parsed
    file's path in a Lambda's environment variables, where CKV_AWS_45 takes any run of 40
    base64 characters in an absolute temp path (`239/checkov0/cloudformation/dev/hyperpod`)
    for an AWS secret key; paths relative to the folder are ours and never that long.
    `--compact` leaves each result's code block out: the same checks and verdicts, 13 MB of
    JSON instead of 354 MB, and half the run (checkov 3.3 over every gated config, 36 -> 18 s).
    Its checks run in its own process (CHECKOV_PARALLELIZATION_TYPE=none): beside the other test
    worker, a process per core that imports checkov again cost about 5 CPU-s more than it saved
    (22.3 s wall and 24.4 CPU-s -> 19.4 s and 19.5; the same 5,206 passed and 749 skipped checks)."""
    assert CHECKOV.exists(), "make install creates .venv-checkov"
    result = subprocess.run(
        [str(CHECKOV), "-d", ".", *args, "--skip-download", "--compact", "-o", "json"],
        capture_output=True, text=True, timeout=300, cwd=folder, env={**os.environ, "CHECKOV_PARALLELIZATION_TYPE": "none"},
    )
    assert result.stdout, result.stderr[-2000:]
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, dict) else {r["check_type"]: r for r in reports}


def _failed(results: dict) -> list:
    return [(f["check_id"], f["resource"], f["file_path"]) for f in results["failed_checks"]]


def _job_files(folder, env):
    settings, _ = validation.load_settings(CONTEXT, env)
    objects = job_manifest.objects(settings, image="111111111111.dkr.ecr.us-east-1.amazonaws.com/train:abc")
    folder.mkdir(parents=True)
    (folder / "job.yaml").write_text(job_manifest.to_yaml(objects))
    # checkov has no model of the HyperPodPyTorchJob CRD, so its pod template is also
    # scanned as the Pod the operator creates from it.
    job = objects[-1]
    template = job["spec"]["replicaSpecs"][0]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": job["metadata"]["name"], "namespace": job["metadata"]["namespace"],
                                                           **template["metadata"]}, "spec": template["spec"]}
    (folder / "pod.yaml").write_text(yaml.safe_dump_all([objects[1], pod]))
    return template


@pytest.fixture(scope="session")
def checkov_files(synth, tmp_path_factory) -> dict:
    """checkov's results per scanned file (its path under the scanned folder), from one run over
    every gated config's templates (cloudformation/<config>/) and each environment's rendered job
    (kubernetes/<env>/): a process per config or file spent most of its time starting."""
    root = tmp_path_factory.mktemp("checkov")
    for name in GATED:
        folder = root / "cloudformation" / name
        folder.mkdir(parents=True)
        s = synth(name)
        for suffix in gated_templates(synth, name):  # a capability's templates that equal dev's are dev's
            # .template, an ending checkov's CloudFormation runner reads and its Kubernetes runner
            # does not: as .json, every template was also parsed as YAML for Kubernetes manifests.
            (folder / f"{s.settings.stack_name(suffix)}.template").write_text(json.dumps(s.templates[suffix]))
    templates = {env: _job_files(root / "kubernetes" / env, env) for env in ENVIRONMENTS}
    reports = _checkov(root, "--framework", "cloudformation", "kubernetes")
    assert set(reports) == {"cloudformation", "kubernetes"}, list(reports)
    files = {}
    for report in reports.values():
        for outcome in ("passed_checks", "failed_checks", "skipped_checks"):
            for check in report["results"][outcome]:
                found = files.setdefault(check["file_path"].strip("/"), {"passed_checks": [], "failed_checks": [], "skipped_checks": []})
                found[outcome].append(check)
    return {"files": files, "job_templates": templates}


def _checked(checkov_files, where: str) -> dict:
    """The results of the file `where`, or of every file scanned under the folder `where`, together."""
    out = {"passed_checks": [], "failed_checks": [], "skipped_checks": []}
    for path, results in checkov_files["files"].items():
        if path == where or path.startswith(f"{where}/"):
            for outcome, checks in results.items():
                out[outcome] += checks
    return out


@pytest.mark.parametrize("env", GATED)
def test_checkov_finds_no_failed_check_in_any_template(checkov_files, env):
    results = _checked(checkov_files, f"cloudformation/{env}")
    assert len(results["passed_checks"]) > 20
    assert _failed(results) == []


@pytest.mark.parametrize("env", GATED)
def test_every_checkov_skip_in_a_template_carries_a_specific_comment(synth, env):
    skips = [
        (lid, skip)
        for template in synth(env).templates.values()
        for lid, res in template["Resources"].items()
        for skip in res.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips  # the CDK-internal Lambdas are there, so there must be some
    for lid, skip in skips:
        assert skip["id"].startswith("CKV") and len(skip.get("comment", "")) >= 40, (lid, skip)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_checkov_kubernetes_passes_the_job_manifest(checkov_files, env):
    template = checkov_files["job_templates"][env]
    assert _failed(_checked(checkov_files, f"kubernetes/{env}/job.yaml")) == []
    pod = _checked(checkov_files, f"kubernetes/{env}/pod.yaml")
    assert len(pod["passed_checks"]) > 50 and _failed(pod) == []
    skips = {k: v for k, v in template["metadata"]["annotations"].items() if k.startswith("checkov.io/skip")}
    for value in skips.values():
        check, _, comment = value.partition("=")
        assert check.startswith("CKV_K8S_") and len(comment) >= 40, value
    assert {s["check_id"] for s in pod["skipped_checks"]} == {v.split("=")[0] for v in skips.values()}


# ------------------------------------------------------------------ least privilege


def _acknowledged_iam5(outdir) -> dict[str, list[str]]:
    """construct path -> reasons of the IAM5 acknowledgments on it."""
    out: dict[str, list[str]] = {}
    for _, rule, path, reason in review.load_nag(outdir).acknowledged:
        if rule.startswith("AwsSolutions-IAM5"):
            out.setdefault(path, []).append(reason)
    return out


def _violations(roles, acks) -> list:
    bad = []
    for st in iam_audit.all_statements(roles):
        if st.any_action:
            bad.append(("Action *", st.path))
        elif st.mutating_on_any_resource and not any(len(r) >= 40 for r in acks.get(st.path, [])):
            bad.append(("mutating action on Resource *", st.path, st.mutating_on_any_resource))
    return bad


@pytest.mark.parametrize("env", GATED)
def test_no_role_can_do_anything_or_mutate_everything(synth, env):
    s = synth(env)
    roles = iam_audit.audit({s.settings.stack_name(k): t for k, t in s.templates.items()})
    assert len(roles) >= 8
    assert _violations(roles, _acknowledged_iam5(s.outdir)) == []


@pytest.mark.parametrize("env", GATED)
def test_every_wildcard_statement_is_acknowledged_with_a_reason(synth, env):
    s = synth(env)
    roles = iam_audit.audit({s.settings.stack_name(k): t for k, t in s.templates.items()})
    acks = _acknowledged_iam5(s.outdir)
    for st in iam_audit.all_statements(roles):
        if st.wildcard_actions or st.wildcard_resources:
            assert any(st.path.startswith(p.rsplit("/Resource", 1)[0]) or p.startswith(st.path.rsplit("/Resource", 1)[0])
                       for p in acks), st.path


def test_the_walk_catches_what_it_must():
    template = {"Resources": {
        "R": {"Type": "AWS::IAM::Role", "Properties": {"Policies": [{"PolicyDocument": {"Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"}]}}]}},
        "P": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"Roles": [{"Ref": "R"}], "PolicyDocument": {"Statement": [
            {"Effect": "Allow", "Action": ["s3:DeleteObject", "s3:GetObject"], "Resource": "*"}]}}},
    }}
    roles = iam_audit.audit({"s": template})
    found = _violations(roles, {})
    assert ("Action *", "R") in found
    assert ("mutating action on Resource *", "P", ["s3:DeleteObject"]) in found
    assert iam_audit.wildcard_figure(roles) == (1, 1)


# ------------------------------------------------------------------ prod data safety


def test_prod_protects_every_stack_from_termination(synth):
    manifest = json.loads((synth("prod").outdir / "manifest.json").read_text())
    stacks = {n: a for n, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
    assert len(stacks) == len(STACK_SUFFIXES) and all(a["properties"].get("terminationProtection") for a in stacks.values())


@pytest.mark.parametrize("env, policy", [("prod", "Retain"), ("dev", "Delete")])
def test_buckets_are_versioned_and_retained_in_prod(synth, env, policy):
    s = synth(env)
    buckets = [r for t in s.templates.values() for r in t["Resources"].values() if r["Type"] == "AWS::S3::Bucket"]
    assert len(buckets) == 3  # access logs, lifecycle scripts, checkpoints
    for b in buckets:
        assert b["DeletionPolicy"] == policy and b["UpdateReplacePolicy"] == policy
        assert b["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_customer_managed_keys_rotate_and_cover_secrets_s3_logs(synth, env):
    s = synth(env)
    keys = {k: r for t in s.templates.values() for k, r in t["Resources"].items() if r["Type"] == "AWS::KMS::Key"}
    assert {k.split("Key")[0] for k in keys} >= {"Secrets", "Logs", "Data", "Metrics"}
    assert all(r["Properties"]["EnableKeyRotation"] for r in keys.values())
    if env == "prod":
        # Data keys outlive their stack; a HyperPod group's volume key guards only its nodes' EBS
        # volumes, which are deleted with the cluster, so it goes too (deletion scheduled).
        volume = {k for k in keys if k.startswith("VolumeKey")}
        assert volume and all(keys[k]["DeletionPolicy"] == "Delete" for k in volume)
        assert all(r["DeletionPolicy"] == "Retain" for k, r in keys.items() if k not in volume)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_log_group_has_explicit_retention_and_a_key(synth, env):
    s = synth(env)
    groups = [r for t in s.templates.values() for r in t["Resources"].values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert groups
    for g in groups:
        assert g["Properties"]["RetentionInDays"] == s.settings.protection.log_retention_days
        assert "KmsKeyId" in g["Properties"]
