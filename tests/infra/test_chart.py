"""make hyperpod-chart: fetch a pinned revision, build dependencies, publish atomically."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra import chart, hyperpod_chart
from infra.config import HelmChartSource


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def chart_repo(tmp_path):
    """A local git repository laid out like aws/sagemaker-hyperpod-cli."""
    repo = tmp_path / "upstream"
    chart_dir = repo / "helm_chart" / "HyperPodHelmChart"
    chart_dir.mkdir(parents=True)
    (chart_dir / "Chart.yaml").write_text("apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n")
    # A local subchart with a remote dependency of its own (the GPU operator's), and one without.
    for name, deps in (("gpu-operator", "dependencies:\n  - name: gpu-operator\n    repository: https://helm.ngc.nvidia.com/nvidia\n"), ("storage", "")):
        (chart_dir / "charts" / name).mkdir(parents=True)
        (chart_dir / "charts" / name / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: 0.1.0\n# no dependencies here\n{deps}")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "chart")
    _git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    return repo, rev


@pytest.fixture
def helm(tmp_path):
    """Stands in for helm: `dependency build` writes charts/ like the real one does."""
    tool = tmp_path / "helm"
    tool.write_text(f'#!/bin/sh\n[ "$1 $2" = "dependency build" ] || exit 2\nmkdir -p "$3/charts" && touch "$3/charts/built"\necho "$3" >> {tmp_path}/helm.log\n')
    tool.chmod(0o755)
    return str(tool)


def test_prepare_fetches_the_pinned_revision_and_builds_dependencies(tmp_path, chart_repo, helm):
    repo, rev = chart_repo
    source = HelmChartSource(repository=f"file://{repo}", revision=rev)
    root = tmp_path / "build"
    assert not chart.is_prepared(rev, root)
    out = chart.prepare(source, root=root, helm=helm)
    assert out == chart.prepared_dir(rev, root)
    assert (out / "Chart.yaml").is_file() and (out / "charts" / "built").exists()
    assert chart.is_prepared(rev, root)
    assert not (out / ".git").exists() and [p.name for p in (root / rev).iterdir()] == ["HyperPodHelmChart"]
    # helm does not recurse: the subchart with remote dependencies is built first, the other not at all.
    built = [Path(line).name for line in (tmp_path / "helm.log").read_text().split()]
    assert built == ["gpu-operator", "HyperPodHelmChart"]


def test_a_revision_that_does_not_exist_fails_with_the_git_error_and_leaves_nothing(tmp_path, chart_repo, helm):
    repo, _ = chart_repo
    source = HelmChartSource(repository=f"file://{repo}", revision="0" * 40)
    root = tmp_path / "build"
    with pytest.raises(chart.ChartNotPrepared, match="git fetch"):
        chart.prepare(source, root=root, helm=helm)
    assert not chart.is_prepared("0" * 40, root)
    assert [p for p in root.iterdir()] == []


def test_a_missing_helm_is_reported_before_anything_is_fetched(tmp_path, chart_repo):
    repo, rev = chart_repo
    with pytest.raises(chart.ChartNotPrepared, match="helm-that-is-not-installed is not on PATH"):
        chart.prepare(HelmChartSource(repository=f"file://{repo}", revision=rev), root=tmp_path / "b", helm="helm-that-is-not-installed")


def test_status_message_says_what_to_run():
    assert "make hyperpod-chart ENV=prod" in chart.not_prepared_message("prod", "a" * 40)


def test_without_the_chart_every_stack_stops_its_own_deploy_with_the_fix(synth):
    s = synth("dev")
    assert not chart.is_prepared(s.settings.hyperpod.helm_chart.revision)  # as on a fresh clone
    for name, template in s.templates.items():
        (assertion,) = template["Rules"]["HyperPodChartPrepared"]["Assertions"]
        # CloudFormation evaluates rules before creating anything in the change set
        assert assertion["Assert"] == {"Fn::Equals": ["not prepared", "prepared"]}, name
        assert "make hyperpod-chart ENV=dev" in assertion["AssertDescription"]


def _prepared_chart(root: Path, nvidia_repository: str = "nvcr.io/nvidia/k8s-device-plugin") -> Path:
    """A prepared chart's layout after `helm dependency build`: local subcharts as folders,
    remote ones as the .tgz helm downloads, each with the image keys CHART_IMAGES reads."""
    import io
    import tarfile

    import yaml

    charts = root / "charts"
    local = {
        "training-operators": {"image": {"repository": "kubeflow/training-operator", "tag": "v1-855e096"}},
        "mpi-operator": {"mpiOperator": {"image": {"repository": "mpioperator/mpi-operator", "tag": "0.5"}}},
        "health-monitoring-agent": {"hmaimage": "", "imageTag": ""},
        "neuron-device-plugin": {"namespace": "kube-system"},
    }
    for name, values in local.items():
        (charts / name / "templates").mkdir(parents=True)
        (charts / name / "values.yaml").write_text(yaml.safe_dump(values))
    (charts / "neuron-device-plugin/templates/k8s-neuron-device-plugin.yaml").write_text(
        "      - image: public.ecr.aws/neuron/neuron-device-plugin:2.19.16.0\n")
    (charts / "health-monitoring-agent/templates/_helpers.tpl").write_text('{{- $tag := "1.0.1892.0_1.0.424.0" -}}\n')
    remote = {
        "nvidia-device-plugin-0.16.1.tgz": ("nvidia-device-plugin", {"image": {"repository": nvidia_repository, "tag": ""}}),
        "aws-efa-k8s-device-plugin-v0.5.20.tgz": ("aws-efa-k8s-device-plugin", {"image": {
            "repository": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin", "tag": "v0.5.13"}}),
    }
    for archive, (name, values) in remote.items():
        data = yaml.safe_dump(values).encode()
        with tarfile.open(charts / archive, "w:gz") as tar:
            info = tarfile.TarInfo(f"{name}/values.yaml")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return root


def test_a_prepared_chart_is_checked_against_the_images_the_stacks_point_elsewhere(tmp_path):
    assert chart.verify_images(_prepared_chart(tmp_path / "same")) == []
    (line,) = chart.verify_images(_prepared_chart(tmp_path / "moved", nvidia_repository="nvcr.io/nvidia/k8s-device-plugin-v2"))
    assert line.startswith("nvidia-device-plugin: image.repository is 'nvcr.io/nvidia/k8s-device-plugin-v2'")


def test_every_chart_image_is_pinned_by_tag_where_its_value_would_take_a_digest_and_the_security_page_says_so():
    import re

    from infra import grammars
    from tests.conftest import ROOT

    # The chart's value keys at the pinned revision, read from its values.yaml files.
    lines = (ROOT / "tests/fixtures/hyperpod_chart_value_keys.txt").read_text().splitlines()
    keys = {line for line in lines if line and not line.startswith("#")}
    digest = "sha256:" + "0" * 64
    for image in hyperpod_chart.CHART_IMAGES:
        assert set(image.keys) <= keys, image.subchart
        if image.digest_key is None:
            assert not image.keys  # only an image its template writes takes no digest
            continue
        # The key, given a digest, renders what the distribution reference grammar takes
        # (reference := name [":" tag] ["@" digest]) and what a registry resolves by digest.
        value = f"{image.tag}@{digest}" if image.keys[image.digest_key] == "tag" else f"{image.upstream('us-east-1')}@{digest}"
        values: dict = {}
        hyperpod_chart.set_value(values, image.digest_key, value)
        rendered = hyperpod_chart.rendered_images(values, "us-east-1")[image.subchart]
        assert rendered.endswith(f":{image.tag}@{digest}") and grammars.image_reference_problem(rendered) is None
    # Every image is named, with why it is pinned by tag only, on the security page.
    from tests import doc_pages

    text = hyperpod_chart.pinning()
    named = re.findall(r"^- `([\w-]+)` `", text, re.M)
    assert named == [i.subchart for i in hyperpod_chart.CHART_IMAGES]
    assert text in doc_pages.text("security.md")
