"""The add-on contract, proven on the synthesized templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from addons import registry
from addons.cert_manager import CertManagerAddon
from addons.training_operator import TrainingOperatorAddon
from infra import config, validation
from tests.conftest import ENVIRONMENTS, patched_context


def _addons(s) -> dict:
    """EKS add-on name -> (logical id, resource) in the addons stack."""
    return {r["Properties"]["AddonName"]: (k, r) for k, r in s.templates["addons"]["Resources"].items() if r["Type"] == "AWS::EKS::Addon"}


def _depends(s, name) -> set:
    return set(_addons(s)[name][1].get("DependsOn", []))


def _id(s, name) -> str:
    return _addons(s)[name][0]


def _of_type(s, type_) -> dict:
    return s.resources("addons", type_)


OPERATOR = "amazon-sagemaker-hyperpod-training-operator"
GOVERNANCE = "amazon-sagemaker-hyperpod-taskgovernance"
OBSERVABILITY = "amazon-sagemaker-hyperpod-observability"


def _gates(s, suffix="addons") -> dict:
    """(namespace, kind, name) -> (logical id, resource) of each kubectl readiness gate."""
    return {
        (r["Properties"]["ObjectNamespace"], r["Properties"]["ObjectType"], r["Properties"]["ObjectName"]): (k, r)
        for k, r in s.resources(suffix, "Custom::AWSCDK-EKS-KubernetesObjectValue").items()
    }


# The deployments the awsome Terraform waits on before it goes on (cert_manager.tf,
# task_governance/main.tf: kubectl wait --for=condition=available).
CERT_MANAGER_WEBHOOK = ("cert-manager", "deployment", "cert-manager-webhook")
KUEUE = ("kueue-system", "deployment", "kueue-controller-manager")


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_training_operator_waits_for_the_cert_manager_webhook_and_kueue_to_serve(synth, env):
    s = synth(env)
    gates = _gates(s)
    for gate in (CERT_MANAGER_WEBHOOK, KUEUE):
        gate_id, gate_resource = gates[gate]
        assert gate_resource["Properties"]["JsonPath"] == ".status.availableReplicas"
        assert gate_id in _depends(s, OPERATOR)
    assert _id(s, "cert-manager") in gates[CERT_MANAGER_WEBHOOK][1]["DependsOn"]
    assert _id(s, GOVERNANCE) in gates[KUEUE][1]["DependsOn"]


def test_the_training_operator_is_ready_when_its_job_type_is_established(synth):
    s = synth("dev")
    (gate_id, gate), = [v for k, v in _gates(s).items() if k[1] == "customresourcedefinition"]
    # The CRD's identity, as the official sagemaker-hyperpod models name it (FACTS).
    assert gate["Properties"]["ObjectName"] == "hyperpodpytorchjobs.sagemaker.amazonaws.com"
    assert "InitialNamesAccepted" in gate["Properties"]["JsonPath"]  # Established True (tests/test_gate_jsonpaths.py runs it)
    assert _id(s, OPERATOR) in gate["DependsOn"]


def test_training_operator_waits_for_its_pod_identity_association(synth):
    s = synth("dev")
    (assoc_id, assoc), = [(k, r) for k, r in _of_type(s, "AWS::EKS::PodIdentityAssociation").items() if k.startswith("TrainingOperator")]
    assert assoc_id in _depends(s, OPERATOR)
    assert assoc["Properties"]["Namespace"] == "aws-hyperpod"
    assert assoc["Properties"]["ServiceAccount"] == "hp-training-operator-controller-manager"


def test_pod_identity_agent_comes_from_the_cluster_stack_and_is_installed_once(synth):
    s = synth("dev")
    everywhere = [
        r for t in s.templates.values() for r in t["Resources"].values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "eks-pod-identity-agent"
    ]
    assert len(everywhere) == 1
    assert "eks-pod-identity-agent" not in _addons(s)


def test_every_addon_waits_for_the_hyperpod_cluster(synth):
    s = synth("dev")
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    assert "hyperpod-dev-hyperpod" in manifest["artifacts"]["hyperpod-dev-addons"]["dependencies"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_core_addons_come_with_the_cluster_as_both_references_create_them(synth, env):
    # Quick setup eks/cloudformation/eks-template.yaml and awsome nested-stacks/eks-cluster-stack.yaml:
    # vpc-cni, kube-proxy, coredns, eks-pod-identity-agent, each ResolveConflicts OVERWRITE,
    # in the EKS stack, before any node.
    s = synth(env)
    core = {r["Properties"]["AddonName"]: r["Properties"] for r in s.resources("cluster", "AWS::EKS::Addon").values()}
    assert set(core) == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent"}
    assert {name: props["ResolveConflicts"] for name, props in core.items()} == dict.fromkeys(core, "OVERWRITE")
    assert "coredns" not in _addons(s)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_addon_overwrites_conflicts_as_the_references_do(synth, env):
    s = synth(env)
    assert {name: r["Properties"].get("ResolveConflicts") for name, (_, r) in _addons(s).items()} == dict.fromkeys(_addons(s), "OVERWRITE")


REFERENCE = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "observability_addon_reference.json").read_text())


def _observability_values(s) -> dict:
    raw = _addons(s)[OBSERVABILITY][1]["Properties"]["ConfigurationValues"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in raw))  # tokens sit inside JSON strings


def test_prometheus_comes_before_observability_and_is_its_endpoint_without_the_trailing_slash(synth):
    # The AMP API's PrometheusEndpoint ends in "/"; the awsome Terraform strips it and the quick
    # setup builds the URL without it (tests/fixtures/observability_addon_reference.json).
    s = synth("dev")
    (prom_id,) = _of_type(s, "AWS::APS::Workspace")
    raw = _addons(s)[OBSERVABILITY][1]["Properties"]["ConfigurationValues"]["Fn::Join"][1]
    values = json.dumps(raw)
    assert f'"Fn::GetAtt": ["{prom_id}", "WorkspaceId"]' in values and "PrometheusEndpoint" not in values
    assert f'"Fn::GetAtt": ["{prom_id}", "Arn"]' in values
    start = next(i for i, p in enumerate(raw) if isinstance(p, str) and p.endswith('"prometheusEndpoint":"https://aps-workspaces.us-east-1.'))
    assert raw[start + 1 : start + 4] == [{"Ref": "AWS::URLSuffix"}, "/workspaces/", {"Fn::GetAtt": [prom_id, "WorkspaceId"]}]
    assert raw[start + 4].startswith('","arn":')  # the value ends right after the id: no "/"


@pytest.mark.parametrize("grafana", [False, True])
def test_observability_values_use_only_keys_a_deploying_reference_sends(synth, grafana):
    # AWS publishes no configuration schema for this add-on; a key outside it fails CreateAddon.
    s = synth("dev", {"addons": {"observability": {"grafana": {"enabled": grafana}}}})
    values = _observability_values(s)
    assert _key_paths(values) <= _key_paths(REFERENCE["configuration_values"])
    assert set(values["metricsProvider"]) == set(REFERENCE["configuration_values"]["metricsProvider"])
    assert ("amgWorkspace" in values) == grafana
    for category in values["metricsProvider"].values():
        assert category["level"] in ("BASIC", "ADVANCED") and isinstance(category["scrapeInterval"], int)


def test_prometheus_workspace_is_encrypted_and_tagged(synth):
    s = synth("dev")
    (ws,) = _of_type(s, "AWS::APS::Workspace").values()
    assert "KmsKeyArn" in ws["Properties"]
    assert {"Key": "environment", "Value": "dev"} in ws["Properties"]["Tags"]


def test_observability_values_come_from_config(synth):
    s = synth("dev", {"addons": {"observability": {"scrape_interval_seconds": 60, "metrics": {"training": "ADVANCED"}, "logging": False}}})
    values = _observability_values(s)
    assert values["metricsProvider"]["trainingMetrics"] == {"level": "ADVANCED", "scrapeInterval": 60}
    assert values["metricsProvider"]["nodeMetrics"]["scrapeInterval"] == 60
    assert values["logging"] == {"enabled": False}
    assert "amgWorkspace" not in values


def _key_paths(value, prefix=""):
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _key_paths(v, f"{prefix}{k}.")}
    return {prefix.rstrip(".")}


def test_cert_manager_values_use_only_the_keys_the_reference_passes_and_tolerate_every_taint(synth):
    # awsome terraform-modules/.../hyperpod_cluster/cert_manager.tf: a key outside the add-on's
    # configuration schema fails CreateAddon.
    reference_keys = {"replicaCount", "tolerations", "webhook.replicaCount", "webhook.tolerations", "cainjector.replicaCount", "cainjector.tolerations"}
    s = synth("dev")
    values = json.loads(_addons(s)["cert-manager"][1]["Properties"]["ConfigurationValues"])
    assert _key_paths(values) <= reference_keys
    every_effect = [{"operator": "Exists", "effect": e} for e in ("NoSchedule", "NoExecute", "PreferNoSchedule")]
    for part in (values, values["webhook"], values["cainjector"]):
        assert sorted(part["tolerations"], key=str) == sorted(every_effect, key=str)


def test_pinned_version_and_extra_values_come_from_config(synth):
    s = synth("dev", {"addons": {"cert_manager": {"version": "v1.18.2-eksbuild.3", "configuration_values": {"replicaCount": 2}}}})
    props = _addons(s)["cert-manager"][1]["Properties"]
    assert props["AddonVersion"] == "v1.18.2-eksbuild.3"
    values = json.loads(props["ConfigurationValues"])
    assert values["replicaCount"] == 2 and values["tolerations"]


# ------------------------------------------------------------------ roles


def _role(s, prefix) -> dict:
    (role,) = [r for k, r in _of_type(s, "AWS::IAM::Role").items() if k.startswith(prefix)]
    return role["Properties"]


def _trust_is_pod_identity_for_this_cluster(props):
    (st,) = props["AssumeRolePolicyDocument"]["Statement"]
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(st["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert st["Condition"]["StringEquals"] == {"aws:SourceAccount": "111111111111"}
    assert "Cluster" in json.dumps(st["Condition"]["ArnEquals"]["aws:SourceArn"])


def test_training_operator_role_has_only_its_managed_policy(synth):
    s = synth("dev")
    props = _role(s, "TrainingOperatorRole")
    _trust_is_pod_identity_for_this_cluster(props)
    (arn,) = props["ManagedPolicyArns"]
    assert "AmazonSageMakerHyperPodTrainingOperatorAccess" in json.dumps(arn)
    assert "Policies" not in props
    assert not [p for k, p in _of_type(s, "AWS::IAM::ManagedPolicy").items() if k.startswith("TrainingOperator")]


def test_collector_role_writes_only_to_this_workspace_and_cluster_logs(synth):
    s = synth("dev")
    _trust_is_pod_identity_for_this_cluster(_role(s, "ObservabilityCollectorRole"))
    (policy,) = [p for k, p in _of_type(s, "AWS::IAM::ManagedPolicy").items() if k.startswith("ObservabilityCollector")]
    statements = {st["Sid"]: st for st in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"RemoteWrite", "ClusterLogs", "LogsWithoutResource"}
    # Every CloudWatch Logs action HyperPod's observability troubleshooting page lists, on the
    # cluster's log groups where the action takes a resource at all.
    granted = {a for sid in ("ClusterLogs", "LogsWithoutResource") for a in statements[sid]["Action"]}
    assert granted == set(REFERENCE["collector_logs_actions"])
    assert statements["LogsWithoutResource"]["Resource"] == "*"
    assert sorted(statements["LogsWithoutResource"]["Action"]) == ["logs:DescribeLogGroups", "logs:StopQuery"]
    (prom_id,) = _of_type(s, "AWS::APS::Workspace")
    assert statements["RemoteWrite"]["Action"] == "aps:RemoteWrite"
    assert statements["RemoteWrite"]["Resource"] == {"Fn::GetAtt": [prom_id, "Arn"]}
    assert all(":log-group:/aws/sagemaker/Clusters/*" in json.dumps(r) for r in statements["ClusterLogs"]["Resource"])
    assert all(a.startswith("logs:") for a in statements["ClusterLogs"]["Action"])


def test_collector_association_targets_the_otel_collector(synth):
    (assoc,) = [r for k, r in _of_type(synth("dev"), "AWS::EKS::PodIdentityAssociation").items() if k.startswith("ObservabilityCollector")]
    assert assoc["Properties"]["Namespace"] == "hyperpod-observability"
    assert assoc["Properties"]["ServiceAccount"] == "hyperpod-observability-operator-otel-collector"


# ------------------------------------------------------------------ switches


OBSERVABILITY_ONLY = {"Prometheus", "ObservabilityCollector", "ObservabilityAddon", "MetricsKey"}


def _ids(s) -> set:
    return set(s.templates["addons"]["Resources"])


def test_switching_observability_off_removes_it_and_only_what_it_needed(synth):
    on, off = synth("dev"), synth("dev", {"addons": {"observability": {"enabled": False}}})
    removed = _ids(on) - _ids(off)
    assert removed and all(any(r.startswith(p) for p in OBSERVABILITY_ONLY) for r in removed)
    assert not [r for r in _ids(off) if any(r.startswith(p) for p in OBSERVABILITY_ONLY)]
    assert _ids(off) <= _ids(on)
    assert "PrometheusEndpoint" not in off.templates["addons"].get("Outputs", {})


def test_switching_the_training_operator_off_keeps_cert_manager(synth):
    off = synth("dev", {"addons": {"training_operator": {"enabled": False}}, "sample_job": {"enabled": False}})
    assert OPERATOR not in _addons(off) and "cert-manager" in _addons(off)
    assert not [k for k in _ids(off) if k.startswith("TrainingOperator")]
    assert _ids(off) <= _ids(synth("dev"))


def test_a_missing_requirement_is_a_config_error_naming_both_addons():
    settings, _ = validation.load_settings(patched_context("dev", {"addons": {"cert_manager": {"enabled": False}}}), "dev")
    with pytest.raises(config.ConfigError) as exc:
        registry.plan(settings)
    (line,) = exc.value.problems
    assert "addons.training_operator.enabled" in line and "addons.cert_manager" in line


def test_order_follows_requirements_not_list_position():
    settings, _ = validation.load_settings(patched_context("dev", {}), "dev")
    order = [type(a) for a in registry.plan(settings)]
    assert order.index(CertManagerAddon) < order.index(TrainingOperatorAddon)
    keys = [a.key for a in registry.plan(settings)]
    assert keys.index("task_governance") < keys.index("training_operator")


def test_grafana_when_enabled_is_wired_into_observability(synth):
    s = synth("dev", {"addons": {"observability": {"grafana": {"enabled": True}}}})
    (ws,) = _of_type(s, "AWS::Grafana::Workspace").values()
    assert ws["Properties"]["AuthenticationProviders"] == ["AWS_SSO"]
    assert "amgWorkspace" in json.dumps(_addons(s)[OBSERVABILITY][1]["Properties"]["ConfigurationValues"])
    assert "GrafanaUrl" in s.templates["addons"]["Outputs"]
    (grafana_policy,) = [p for k, p in _of_type(s, "AWS::IAM::ManagedPolicy").items() if k.startswith("GrafanaPolicy")]
    (st,) = grafana_policy["Properties"]["PolicyDocument"]["Statement"]
    assert all(a.startswith("aps:") for a in st["Action"]) and "Fn::GetAtt" in st["Resource"]


def test_grafana_with_saml_needs_the_metadata_url():
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context("dev", {"addons": {"observability": {"grafana": {"enabled": True, "authentication_providers": ["SAML"]}}}}), "dev")
    assert any("addons.observability.grafana.saml_metadata_url" in p for p in exc.value.problems)
