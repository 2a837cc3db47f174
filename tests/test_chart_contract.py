"""What the nodes pull and from where, each held against its source: egress as both AWS
reference templates allow, the dependencies chart pinned to the revision its value keys were
read from (tests/fixtures/hyperpod_chart_value_keys.txt) and given only keys it has, every
image from ECR in its own region where there is no NAT, and the device plugins following the
instance groups."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infra import config, hyperpod_chart, validation
from stacks.cluster import chart_values
from tests.conftest import CONTEXT, ENVIRONMENTS, GATED, patched_context

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- network and chart


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_nodes_may_send_anywhere_as_both_references_allow(synth, env):
    # awsome nested-stacks/security-group-stack.yaml: all traffic to itself and to 0.0.0.0/0.
    t = synth(env).templates["network"]["Resources"]
    (sg_id,) = [k for k, r in t.items() if r["Type"] == "AWS::EC2::SecurityGroup" and k.startswith("EfaSecurityGroup")]
    egress = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    ours = [e for e in egress if e["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}]
    assert {"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"} in [{k: e[k] for k in ("IpProtocol", "CidrIp") if k in e} for e in ours]


def _chart_keys() -> tuple[str, set[str]]:
    lines = (ROOT / "tests/fixtures/hyperpod_chart_value_keys.txt").read_text().splitlines()
    (revision,) = re.findall(r"revision ([0-9a-f]{40})", "\n".join(lines[:3]))
    return revision, {line for line in lines if line and not line.startswith("#")}


def test_the_chart_is_pinned_to_the_revision_its_value_keys_were_read_from():
    revision, _ = _chart_keys()
    assert CONTEXT["defaults"]["hyperpod"]["helm_chart"]["revision"] == revision == "a00b22d17ea928a6e39a43bd2efdafe01b1005ea"


@pytest.mark.parametrize("env", [*ENVIRONMENTS, "mig"])
def test_chart_values_set_only_keys_the_chart_has(env):
    from tests.conftest import CAPABILITIES, patched_context

    _, keys = _chart_keys()
    settings = validation.load_settings(patched_context("dev", CAPABILITIES[env]) if env in CAPABILITIES else CONTEXT, "dev" if env in CAPABILITIES else env)[0]

    def leaves(value, prefix=""):
        if isinstance(value, dict):
            return {p for k, v in value.items() for p in leaves(v, f"{prefix}{k}.")}
        return {prefix.rstrip(".")}

    assert leaves(chart_values(settings)) <= keys


# ---------------------------------------------------------------- images in a closed network


def _chart_values_in_template(s) -> dict:
    (chart_resource,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
    return json.loads(chart_resource["Properties"]["Values"])


@pytest.mark.parametrize("env", ["closed-network", "dev"])
def test_a_network_without_nat_pulls_every_chart_image_from_ecr_in_its_own_region(synth, env):
    # ECR's VPC endpoints serve this region's private registries only, not public ECR or other
    # registries, and a pull-through cache needs a NAT for its first pull (ECR user guide, VPC
    # endpoints). The chart's images come from its values: infra/hyperpod_chart.py CHART_IMAGES, read
    # from the chart at the pinned revision and checked again by `make hyperpod-chart`.
    s = synth(env)
    values = _chart_values_in_template(s)
    rendered = hyperpod_chart.rendered_images(values, s.settings.region)
    own = f"{s.settings.account}.dkr.ecr.{s.settings.region}.amazonaws.com/"
    if env == "dev":  # with a NAT the chart keeps its own registries
        assert not s.settings.mirrors_chart_images and any(not uri.startswith(own) for uri in rendered.values())
        assert not s.resources("cluster", "Custom::CDKECRDeployment")
        return
    assert s.settings.mirrors_chart_images
    assert rendered and all(uri.startswith(own) for uri in rendered.values()), rendered
    # Each is a copy, made before the chart, of what the chart would pull.
    repositories = {k: r["Properties"]["RepositoryName"] for k, r in s.resources("cluster", "AWS::ECR::Repository").items()}
    copies = s.resources("cluster", "Custom::CDKECRDeployment")
    (chart_id,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart")
    chart_depends = s.templates["cluster"]["Resources"][chart_id]["DependsOn"]
    for image in hyperpod_chart.CHART_IMAGES:
        if image.subchart not in rendered:
            continue
        (copy_id, copy) = next((k, c) for k, c in copies.items() if c["Properties"]["SrcImage"] == f"docker://{image.upstream(s.settings.region)}")
        (repo_id,) = [k for k in repositories if k in json.dumps(copy["Properties"]["DestImage"])]
        assert rendered[image.subchart] == f"{own}{repositories[repo_id]}:{image.tag}"
        assert json.dumps(copy["Properties"]["DestImage"]).endswith(f':{image.tag}"]]}}')
        assert copy["Properties"]["CopyImageIndex"] in (True, "true")  # arm64 hosts too (GB200)
        assert copy_id in chart_depends


def test_no_image_is_copied_without_credentials_from_a_registry_that_limits_anonymous_pulls(synth):
    # Docker Hub, "Usage and limits": 10 pulls an hour per IPv4 address without credentials; the
    # copier is a Lambda whose outbound address AWS shares. A refused pull fails the cluster stack,
    # whose rollback deletes the control plane: where images are copied, config refuses a Docker
    # Hub source without credentials (tests/bad_inputs), and every copy made carries them.
    assert set(hyperpod_chart.ANONYMOUS_PULL_LIMITS) == {"docker.io/"}
    limited = [i for i in hyperpod_chart.CHART_IMAGES if i.source.startswith(tuple(hyperpod_chart.ANONYMOUS_PULL_LIMITS))]
    assert {i.subchart for i in limited} == {"training-operators", "mpi-operator"}
    seen = 0
    for name in GATED:
        for copy in synth(name).resources("cluster", "Custom::CDKECRDeployment").values():
            source = copy["Properties"]["SrcImage"].removeprefix("docker://")
            if source.startswith(tuple(hyperpod_chart.ANONYMOUS_PULL_LIMITS)):
                seen += 1
                assert copy["Properties"].get("SrcCreds"), (name, source)
    assert seen == len(limited)  # closed-network copies both, with credentials


def test_a_device_plugin_whose_image_no_value_can_move_is_refused_where_images_are_copied():
    from tests.conftest import CAPABILITIES

    patch = config.deep_merge(CAPABILITIES["closed-network"], {
        "hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                         {"name": "trn", "instance_type": "ml.trn1.32xlarge", "count": 1}]},
        "governance": {"teams": []}, "sample_job": {"enabled": False}})
    with pytest.raises(config.ConfigError) as refused:
        validation.load_settings(patched_context("dev", patch), "dev")
    (line,) = [e for e in refused.value.problems if e.startswith("dev: hyperpod.instance_groups:")]
    assert "public.ecr.aws/neuron/neuron-device-plugin:2.19.16.0" in line and "NAT" in line


def test_device_plugins_follow_the_instance_groups_and_tolerate_their_taints(synth):
    # The chart's device plugins schedule on the types in their values and tolerate only the
    # taints listed there (chart values.yaml at the pinned revision): a group tainted by config
    # would never have its GPUs advertised.
    values = _chart_values_in_template(synth("cluster-options"))
    assert values["nvidia-device-plugin"]["devicePlugin"]["enabled"] is True
    assert values["neuron-device-plugin"]["devicePlugin"]["enabled"] is False
    reserved = {"key": "reserved", "operator": "Exists", "effect": "NoSchedule"}
    for plugin, defaults in hyperpod_chart.DEVICE_PLUGIN_TOLERATIONS.items():
        assert values[plugin]["tolerations"] == defaults + [reserved]
    assert "tolerations" not in _chart_values_in_template(synth("dev"))["nvidia-device-plugin"]
