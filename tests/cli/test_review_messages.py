"""What the review and the config's refusals say, with nothing a reader must skip: the title first
(environment, baseline, verdict), no warning a review cannot act on, a place with its column where
a line is not enough, no internal class name, and prices and resource types in plain words. No
synthesis: small reports, texts and a throwaway git repository."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from cli import revision
from cli.review import cost
from cli.review import report as review
from infra.config import ConfigError, read_cdk_json


def _report(**changes) -> dict:
    report = {"env": "prod", "pass": True, "first_deploy": None, "assembly": "cdk.out",
              "changes": {"against": "main (0123456789ab)", "callouts": [], **changes} if changes is not None else None}
    return report


def test_the_title_leads_with_environment_baseline_and_verdict():
    assert review.title(_report(callouts=["PROTECTION OFF: x", "PIN REMOVED: y"])) == \
        "# prod against main (0123456789ab): PASS, 2 to stop at"
    failed = {**_report(), "pass": False}
    assert review.title(failed) == "# prod against main (0123456789ab): FAIL, nothing to stop at"
    first = {**_report(), "changes": None, "first_deploy": "main has no environment prod"}
    assert review.title(first) == "# prod as a first deploy: PASS, nothing to stop at"
    moved = {**_report(callouts=["ENVIRONMENT MOVED: prod moves"]), "first_deploy": "main deploys prod to aws://1/x"}
    assert review.title(moved) == "# prod as a first deploy where it moves: PASS, 1 to stop at"


def test_a_review_does_not_repeat_what_only_a_deploy_can_act_on(tmp_path):
    # stacks/cluster.py warns "deploy will stop: ..." while the chart is not prepared: cdk synth and deploy say it.
    entries = [{"type": "aws:cdk:warning", "data": "deploy will stop: the HyperPod dependencies chart is not prepared"},
               {"type": "aws:cdk:warning", "data": "eks.version: 1.34 is older than ..."}]
    (tmp_path / "hyperpod-dev-network.metadata.json").write_text(json.dumps({"/hyperpod-dev-network": entries}))
    assert review.load_warnings(tmp_path) == ["eks.version: 1.34 is older than ..."]


def test_resource_types_are_named_plainly_in_the_stack_list():
    assert review.type_label("AWS::EKS::Cluster") == "EKS::Cluster"
    assert review.type_label("Custom::AWS") == "Custom::AWS (SDK calls)"  # not "AWS 3"
    assert review.type_label("Custom::AWSCDK-EKS-HelmChart") == "Custom::AWSCDK-EKS-HelmChart"


def test_a_total_with_a_floor_is_at_least_not_about_at_least():
    estimate = {"region": "us-east-1", "table_region": "us-east-1", "as_of": "2026-12-02", "hourly": 279.23, "monthly": 203838.0,
                "floor_types": ["ml.p5.48xlarge"], "rates": "floors", "lines": [], "unpriced": [], "hourly_max": None,
                "autoscaled": False}
    text = "\n".join(cost.markdown(estimate))
    assert "at least **$279.23 an hour" in text and "about at least" not in text
    assert "about **$279.23 an hour" in "\n".join(cost.markdown({**estimate, "floor_types": []}))


def test_a_key_written_twice_on_one_line_says_both_columns():
    with pytest.raises(ConfigError) as err:
        read_cdk_json('{"context": {"env": "dev", "env": "prod"}}')
    (line,) = err.value.problems
    assert line.startswith('cdk.json: "env" is written twice in context, at line 1, columns 14 and 28: JSON leaves')
    with pytest.raises(ConfigError) as err:
        read_cdk_json('{\n "a": 1,\n "a": 2\n}')
    assert 'at line 2 and line 3:' in err.value.problems[0]


def test_a_baseline_revision_whose_config_is_refused_says_its_first_line_not_a_class_name(tmp_path):
    # A revision's own cli.synth refusing its config (ConfigError with .problems, whatever its module).
    repo = tmp_path / "repo"
    (repo / "cli").mkdir(parents=True)
    (repo / "cli" / "__init__.py").write_text("")
    (repo / "cli" / "synth.py").write_text(textwrap.dedent('''
        class ConfigError(ValueError):
            def __init__(self, problems):
                super().__init__(problems)
                self.problems = problems

        def synthesize(context, env, outdir):
            raise ConfigError(["region: 'us-east-9' is not an AWS region", "availability_zones: not in us-east-9"])
    '''))
    (repo / "cdk.json").write_text(json.dumps({"context": {}}))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    with pytest.raises(revision.RevisionError) as err:
        revision.synthesize(repo, "HEAD", commit, "dev", tmp_path / "out")
    message = str(err.value)
    assert message.endswith("failed: region: 'us-east-9' is not an AWS region (and 1 more)")
    assert "ConfigError" not in message and "Traceback" not in message


def _dev(edit) -> dict:
    from tests.conftest import CONTEXT

    context = json.loads(json.dumps(CONTEXT))
    edit(context["environments"]["dev"])
    return context


def _misspelt(dev: dict) -> None:
    dev["governanse"] = dev.pop("governance")


def _negative_gpu_count(dev: dict) -> None:
    dev["hyperpod"]["instance_groups"][-1]["count"] = -1


def _team_twice(dev: dict) -> None:
    dev["governance"]["teams"].append(json.loads(json.dumps(dev["governance"]["teams"][0])))


@pytest.mark.parametrize(("edit", "line"), [
    (lambda d: d.update(region="us-east-9"), "region: 'us-east-9' is not an AWS region"),  # not its three zones again
    (_misspelt, "governanse: unknown field; did you mean governance?"),  # not "sample_job.team: ... teams: (none)"
    (_negative_gpu_count, "hyperpod.instance_groups[1].count: -1 must be 1 to 64"),  # not "-1 GPUs" / "can have (-1)"
    (_team_twice, "governance.teams: 'ml-research' is defined twice"),  # not its quotas counted twice
], ids=["unknown-region", "misspelt-section", "negative-count", "team-twice"])
def test_one_mistake_is_one_line(edit, line):
    from infra import validation

    with pytest.raises(ConfigError) as err:
        validation.load_settings(_dev(edit), "dev")
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(f"dev: {line}"), err.value.problems


def test_a_kubernetes_manifest_change_is_shown_as_the_lines_that_change():
    # cdk diff prints a KubernetesResource's Manifest (a JSON string of several KB) whole on one line before and after.
    from cli.review import diff_text

    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "ml-research", "namespace": "hyperpod-ns-ml-research"},
            "rules": [{"apiGroups": [""], "resources": [f"r{i}" for i in range(40)], "verbs": ["get", "list"]}]}
    changed = json.loads(json.dumps(role))
    changed["rules"][0]["verbs"] = ["get", "list", "delete"]
    text = "\n".join([
        "Resources",
        "[~] Custom::AWSCDK-EKS-KubernetesResource Team/Role TeamRole1234",
        " └─ [~] Manifest",
        f"     ├─ [-] {json.dumps([role])}",
        f"     └─ [+] {json.dumps([changed])}",
    ])
    folded = diff_text.fold(text).splitlines()
    assert len(max(folded, key=len)) < 120  # not two lines of the whole manifest
    assert any("[~] a value of" in line and "the lines that change:" in line for line in folded)
    changes = [line.strip() for line in folded if line.strip()[:1] in "+-"]
    assert [re.sub(r"\s+", " ", line) for line in changes] == ['- "list"', '+ "list",', '+ "delete"']
    # Short values are cdk diff's own text.
    short = "Resources\n[~] AWS::S3::Bucket Data DataABC\n └─ [~] Tags\n     ├─ [-] a\n     └─ [+] b"
    assert diff_text.fold(short) == short
