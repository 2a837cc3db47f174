"""What a feature needs beside its config, held against where each need is written
(infra/prerequisites.py): AWS's pages and API reference, the chart's own values, the corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infra import config, prerequisites, validation
from tests.conftest import CAPABILITIES, ROOT, patched_context

CORPUS = [json.loads(p.read_text()) for p in sorted((ROOT / "tests" / "bad_inputs").glob("*.json"))]
SYSTEM = {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}


def _load(patch: dict):
    return validation.load_settings(patched_context("dev", patch), "dev")


def _problems(patch: dict) -> list[str]:
    with pytest.raises(config.ConfigError) as err:
        _load(patch)
    return err.value.problems


def test_every_row_names_a_config_field_and_its_source():
    fields = {p for p, _ in config.field_paths()}
    for row in prerequisites.TABLE:
        for path in filter(None, (row.field, row.needs_field)):
            assert path in fields or path.replace("[]", "") in fields or path.replace("[].", "[].") in fields, path
        assert len(row.source) > 20, row


def test_every_need_the_table_refuses_is_missing_in_a_case_of_the_corpus():
    # Each case parsed (not checked), and the rows it leaves unmet; every row that refuses is
    # one of them, for a case whose line names that row's field.
    caught = set()
    for case in CORPUS:
        raw = config.merged_environment(patched_context("dev", case["patch"]), "dev")
        try:
            settings = config.Settings.model_validate_json(json.dumps({**raw, "env_name": "dev"}), strict=True)
        except ValueError:
            continue  # refused while parsing, before any row is read
        for row, path, _, _ in prerequisites.unmet(settings):
            if case["field"] in (path, row.needs_field):
                caught.add(prerequisites.TABLE.index(row))
    missing = [row.feature + ": " + row.needs_words(None, None)[:60] for i, row in enumerate(prerequisites.TABLE)
               if not row.contradiction and i not in caught and not callable(row.needs)]
    assert missing == []
    assert all(i in caught for i, row in enumerate(prerequisites.TABLE) if not row.contradiction)


def test_karpenter_needs_automatic_node_recovery():
    # HyperPod's autoscaling page (sagemaker-hyperpod-eks-autoscaling), Prerequisites: continuous
    # provisioning enabled, the health-monitoring agent, and NodeRecovery set to Automatic.
    patch = config.deep_merge(CAPABILITIES["karpenter"], {"hyperpod": {"node_recovery": "None"}})
    (line,) = [p for p in _problems(patch) if p.startswith("dev: hyperpod.node_recovery: 'None'")]
    assert "hyperpod.autoscaling 'karpenter'" in line and "Automatic" in line
    assert _load(config.deep_merge(CAPABILITIES["karpenter"], {"hyperpod": {"node_recovery": "Automatic"}}))


def test_cluster_events_need_continuous_provisioning_and_only_such_a_cluster_gets_their_rule():
    # The HyperPod cluster events reference: "Cluster events are available for HyperPod clusters
    # with NodeProvisioningMode set to Continuous." Chosen on dev (no continuous provisioning),
    # refused; left at their default, the operations stack makes no rule that would never fire.
    from infra import alerting

    chosen = {"operations": {"notifications": {"emails": ["ops@example.com"], "cluster_event_levels": ["Error"]}}}
    (line,) = [p for p in _problems(chosen) if p.startswith("dev: operations.notifications.cluster_event_levels:")]
    assert "continuous_provisioning" in line and "NodeProvisioningMode Continuous" in line
    settings, _ = _load(config.deep_merge(chosen, {"hyperpod": {"continuous_provisioning": True}}))
    assert "ClusterEvent" in {r.id_ for r in alerting.event_rules(settings)}
    settings, _ = _load({"operations": {"notifications": {"emails": ["ops@example.com"]}}})
    assert "ClusterEvent" not in {r.id_ for r in alerting.event_rules(settings)}


def test_a_release_pin_beside_auto_patching_is_a_warning_not_an_error():
    # The SageMaker API's own words for AutoPatchConfig (botocore's model): it applies security
    # patch AMI updates to the group, so a group that also pins ImageReleaseVersion moves past it.
    import botocore.session

    doc = botocore.session.get_session().get_service_model("sagemaker").shape_for("ClusterAutoPatchConfig").documentation
    assert "automatically applies security patch AMI updates" in doc
    group = {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1, "image_release_version": "1.2.3", "auto_patch": {"strategy": "WhenIdle"}}
    _, warnings = _load({"hyperpod": {"instance_groups": [SYSTEM, group]}})
    # Beside the warning every patched group gets (what patching does to it: infra/checks/hyperpod.py).
    (line,) = [w for w in warnings if w.startswith("dev: hyperpod.instance_groups[1].auto_patch:") and "1.2.3" in w]
    assert "past the pin" in line


def test_a_closed_network_needs_exactly_the_endpoints_of_what_is_turned_on():
    # EKS user guide, "Deploy private clusters with limited internet access": an endpoint per
    # service the cluster calls, Managed Prometheus only where it is used (observability).
    assert list(prerequisites.ENDPOINTS) == list(config.ENDPOINT_SERVICES)  # each endpoint the stack makes has its reason
    closed = CAPABILITIES["closed-network"]
    assert not _load(closed)[0].sample_job.hf_token_secret  # the job reads no token: Secrets Manager is not called
    without_prometheus = [s for s in config.ENDPOINT_SERVICES if s not in ("aps-workspaces", "secretsmanager")]
    off = config.deep_merge(closed, {"network": {"interface_endpoints": without_prometheus}, "addons": {"observability": {"enabled": False}}})
    settings, _ = _load(off)
    assert prerequisites.needed_endpoints(settings) == without_prometheus
    on = config.deep_merge(closed, {"network": {"interface_endpoints": without_prometheus}})
    (line,) = [p for p in _problems(on) if p.startswith("dev: network.nat_gateways: 0 needs")]
    assert "missing: aps-workspaces (the observability add-on's collector" in line and "sts" not in line.split("missing:")[1]
    # A job that reads its Hugging Face token calls Secrets Manager, whose interface endpoint
    # (Secrets Manager user guide, "Using an AWS Secrets Manager VPC endpoint") a network without NAT needs.
    token = config.deep_merge(off, {"sample_job": {"hf_token_secret": "hf-token"}})
    (line,) = [p for p in _problems(token) if p.startswith("dev: network.nat_gateways: 0 needs")]
    assert line.split("missing: ")[1].startswith("secretsmanager (the job reading its Hugging Face token at start")


# ECR user guide, "Amazon ECR interface VPC endpoints (AWS PrivateLink)": the ecr.api and ecr.dkr
# endpoints serve private registries of their region; ECR Public and other regions' ECR are not
# behind them, so a network without NAT pulls only from this region's private ECR.
@pytest.mark.parametrize("image", ["public.ecr.aws/pytorch/pytorch:2.7.1", "111111111111.dkr.ecr.us-west-2.amazonaws.com/train:1",
                                   "nvcr.io/nvidia/pytorch:25.01-py3"])
def test_a_closed_network_refuses_a_job_image_it_cannot_pull(image):
    patch = config.deep_merge(CAPABILITIES["closed-network"], {"sample_job": {"image_uri": image}})
    (line,) = [p for p in _problems(patch) if p.startswith("dev: sample_job.image_uri:")]
    assert f"'{image}' needs a copy in a private ECR registry of us-east-1" in line
    ok = config.deep_merge(CAPABILITIES["closed-network"], {"sample_job": {"image_uri": "222222222222.dkr.ecr.us-east-1.amazonaws.com/train:1"}})
    _load(ok)


def test_mirror_images_false_in_a_closed_network_is_refused_naming_what_cannot_be_pulled():
    from infra import hyperpod_chart

    patch = config.deep_merge(CAPABILITIES["closed-network"], {"hyperpod": {"helm_chart": {"mirror_images": False, "docker_hub_secret": None}}})
    (line,) = [p for p in _problems(patch) if p.startswith("dev: hyperpod.helm_chart.mirror_images:")]
    rendered = hyperpod_chart.rendered_images({}, "us-east-1")
    assert rendered["training-operators"] in line and rendered["nvidia-device-plugin"] in line
    assert rendered["health-monitoring-agent"] not in line  # AWS's own, in this region's ECR
    # With a NAT gateway the same choice stands.
    _load({"hyperpod": {"helm_chart": {"mirror_images": False}}})


def test_the_charts_training_operator_takes_no_toleration_so_a_group_without_deep_checks_is_needed():
    # aws/sagemaker-hyperpod-cli, charts/training-operators at the pinned revision: its values.yaml
    # offers no tolerations (nor affinity or node selector; the key list in tests/fixtures, read
    # from the chart) and its Deployment sets none; PR 449 (open) adds the toleration of
    # sagemaker.amazonaws.com/node-health-status=Unschedulable. So a cluster whose every node runs
    # deep health checks has nowhere to run it while they run.
    keys = (ROOT / "tests/fixtures/hyperpod_chart_value_keys.txt").read_text().splitlines()
    operator_keys = [k for k in keys if k.startswith("training-operators.")]
    assert operator_keys and not [k for k in operator_keys if re.search(r"toleration|affinity|nodeSelector", k)]
    p5 = {"name": "gpu", "instance_type": "ml.p5.48xlarge", "count": 2}
    teams = {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}]}]}
    (line,) = [p for p in _problems({"hyperpod": {"instance_groups": [p5]}, "governance": teams})
               if p.startswith("dev: hyperpod.instance_groups: ['gpu']")]
    assert "sagemaker.amazonaws.com/node-health-status=Unschedulable" in line and "PR 449" in line
    tainted = {**SYSTEM, "taints": [{"key": "dedicated", "value": "system", "effect": "NoExecute"}]}
    assert any(p.startswith("dev: hyperpod.instance_groups:") for p in _problems({"hyperpod": {"instance_groups": [tainted, p5]}, "governance": teams}))
    assert _load({"hyperpod": {"instance_groups": [SYSTEM, p5]}, "governance": teams})


def test_grafana_with_saml_needs_the_identity_providers_metadata():
    # AWS::Grafana::Workspace's schema: a SamlConfiguration requires IdpMetadata (a URL or the XML).
    from infra import cfn_schema

    assert cfn_schema.definition("AWS::Grafana::Workspace", "SamlConfiguration")["required"] == ["IdpMetadata"]
    saml = {"addons": {"observability": {"grafana": {"enabled": True, "authentication_providers": ["SAML"]}}}}
    assert any(p.startswith("dev: addons.observability.grafana.saml_metadata_url: None") for p in _problems(saml))


def test_no_group_label_in_hyperpods_own_namespace():
    # HyperPod's page "Resilience-related Kubernetes labels by SageMaker HyperPod": it keeps its
    # nodes' health under sagemaker.amazonaws.com/ (node-health-status, deep-health-check-status,
    # fault-type, fault-reason), the label the job's affinity reads among them.
    from infra.config.hyperpod import HYPERPOD_NAMESPACE
    from manifests import job

    assert job.HEALTH_LABEL.startswith(HYPERPOD_NAMESPACE)
    group = {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1}
    lines = _problems({"hyperpod": {"instance_groups": [SYSTEM, {**group, "labels": {job.HEALTH_LABEL: "Schedulable"}}]}})
    assert any(p.startswith(f"dev: hyperpod.instance_groups[1].labels: '{job.HEALTH_LABEL}' is in HyperPod's own") for p in lines)
    # A prefix that only contains the name is another namespace.
    assert _load({"hyperpod": {"instance_groups": [SYSTEM, {**group, "labels": {"sagemaker.amazonaws.com.example.org/role": "gpu"}}]}})
