"""Serving: the inference operator add-on against the HyperPod setup page, the 3.0 release notes and
the references (tests/fixtures/inference_addon_reference.json names each source), and an
environment without the block built exactly as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from addons import registry
from infra import admission, config, validation
from tests.conftest import CAPABILITIES, patched_context

REFERENCE = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "inference_addon_reference.json").read_text())
INFERENCE = REFERENCE["addon_name"]


def _addons(s) -> dict:
    return {r["Properties"]["AddonName"]: (k, r) for k, r in s.templates["addons"]["Resources"].items() if r["Type"] == "AWS::EKS::Addon"}


def _key_paths(value, prefix=""):
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _key_paths(v, f"{prefix}{k}.")}
    return {prefix.rstrip(".")}


def _values(s) -> dict:
    raw = _addons(s)[INFERENCE][1]["Properties"]["ConfigurationValues"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in raw))


def test_an_environment_with_the_block_off_synthesizes_exactly_as_one_without_it(synth):
    # Every field of the block given, the switch off: not one byte of any template moves.
    off = synth("dev", {"inference": {"enabled": False, "version": "v1.0.0-eksbuild.1",
                                      "endpoint": {"replicas": 4, "gpus_per_replica": 1, "team": "ml-research"}}})
    assert off.templates == synth("dev").templates


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_dev_and_prod_build_nothing_of_serving(synth, env):
    s = synth(env)
    assert not s.settings.inference.enabled
    names = set(_addons(s))
    assert not names & {INFERENCE, "aws-mountpoint-s3-csi-driver", "metrics-server"}
    types = {r["Type"] for t in s.templates.values() for r in t["Resources"].values()}
    assert "AWS::IAM::OIDCProvider" not in types and "Custom::AWSCDKCfnJson" not in types


def test_the_operator_waits_for_every_addon_it_refuses_to_install_without(synth):
    s = synth("inference")
    addons = _addons(s)
    depends = set(addons[INFERENCE][1]["DependsOn"])
    # cert-manager through its readiness gate; the CSI drivers and metrics-server as add-ons.
    assert {addons[name][0] for name in REFERENCE["requires_addons"] if name != "cert-manager"} <= depends
    assert any(d.startswith("CertManagerAddonReady") for d in depends)
    assert addons[INFERENCE][1]["Properties"]["ResolveConflicts"] == "OVERWRITE"


def test_the_operator_gets_only_configuration_keys_a_deploying_reference_sends(synth):
    values = _values(synth("inference"))
    assert _key_paths(values) <= _key_paths(REFERENCE["configuration_values"])
    assert values["alb"]["enabled"] and values["keda"]["enabled"]
    for path in ("executionRoleArn", "tlsCertificateS3Bucket", "hyperpodClusterArn"):
        assert path in values


def _role_with_policy(s, managed: str) -> tuple[str, dict]:
    roles = s.resources("addons", "AWS::IAM::Role")
    return next((k, r) for k, r in roles.items() if any(managed in json.dumps(a) for a in r["Properties"].get("ManagedPolicyArns", [])))


def test_the_execution_role_is_the_one_the_setup_page_and_the_release_notes_describe(synth):
    s, ref = synth("inference"), REFERENCE["execution_role"]
    role_id, role = _role_with_policy(s, ref["managed_policy"])
    props = role["Properties"]
    assert props["RoleName"].startswith(ref["name_prefix"])
    trust = props["AssumeRolePolicyDocument"]["Statement"]
    assert {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}} in trust
    (web,) = [st for st in trust if st["Action"] == "sts:AssumeRoleWithWebIdentity"]
    # The condition's keys name the cluster's OIDC issuer, resolved at deploy (CfnJson): its value
    # holds the subject, the controller's service account.
    subject = s.templates["addons"]["Resources"][web["Condition"]["StringEquals"]["Fn::GetAtt"][0]]
    assert f"system:serviceaccount:{ref['namespace']}:{ref['service_account']}" in json.dumps(subject["Properties"]["Value"])
    actions = {a for p in s.resources("addons", "AWS::IAM::ManagedPolicy").values() if {"Ref": role_id} in p["Properties"].get("Roles", [])
               for st in p["Properties"]["PolicyDocument"]["Statement"] for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert set(ref["release_3_0_actions"]) <= actions


@pytest.mark.parametrize("which", ["alb", "keda"])
def test_the_load_balancer_controller_and_keda_roles_trust_their_service_accounts(synth, which):
    s = synth("inference")
    sa = f"system:serviceaccount:{REFERENCE['execution_role']['namespace']}:{REFERENCE['service_accounts'][which]}"
    subjects = [r for r in s.resources("addons", "Custom::AWSCDKCfnJson").values() if sa in json.dumps(r["Properties"]["Value"])]
    assert len(subjects) == 1


def test_the_tls_bucket_is_encrypted_and_refuses_plain_http(synth):
    s = synth("inference")
    value = _values(s)["tlsCertificateS3Bucket"]
    assert value == "TOKEN"  # the bucket the stack makes, by reference
    buckets = s.resources("addons", "AWS::S3::Bucket")
    (tls,) = [r for k, r in buckets.items() if k.startswith("TlsCertificates")]
    assert tls["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"


# Admission: the endpoint's replicas by the jobs' model (no synthesis).

def _load(patch: dict):
    return registry.load(patched_context("dev", config.deep_merge(CAPABILITIES["inference"], patch)), "dev")


def test_replicas_beyond_what_the_serving_team_can_ever_hold_are_refused_naming_the_replicas():
    with pytest.raises(config.ConfigError) as err:
        _load({"inference": {"endpoint": {"replicas": 3}}})
    (line,) = [l for l in err.value.problems if "inference.endpoint" in l]
    assert line.startswith("dev: inference.endpoint.replicas: 3 replicas of 1 GPU on ml.g5.8xlarge")
    assert "can never all be admitted for team serving" in line and "at most 2 replicas" in line


def test_replicas_held_only_by_borrowing_are_a_warning_and_one_replica_is_guaranteed():
    settings, warnings, _ = _load({"inference": {"endpoint": {"replicas": 2}}})
    assert admission.endpoint(settings).verdict == "borrowing"
    assert any(w.startswith("dev: inference.endpoint.replicas: 2 replicas") and "only by borrowing" in w for w in warnings)
    settings, warnings, _ = _load({})
    assert admission.endpoint(settings).verdict == "guaranteed"


def test_an_inference_priority_not_above_training_is_a_warning():
    _, warnings, _ = _load({"inference": {"endpoint": {"priority": "experimentation"}}})
    assert any("inference.endpoint.priority: 'experimentation' (weight 30) is not above the sample job's 'training' (70)" in w for w in warnings)


def test_the_operator_is_a_pin_and_a_preflight_question_where_it_is_installed():
    from cli.upgrade_plan import addons_of

    settings, warnings, _ = _load({"inference": {"version": "v1.0.0-eksbuild.1"}})
    assert ("inference.version", INFERENCE, "v1.0.0-eksbuild.1") in settings.addon_pins
    assert {(a.name, a.path) for a in addons_of(settings)} >= {(INFERENCE, "inference"), ("aws-mountpoint-s3-csi-driver", "addons.s3_csi")}
    assert any("preflight" in w and "DescribeAddonVersions" in w for w in warnings)


def test_adopting_the_quick_setups_operator_builds_none_of_it_and_needs_no_nat():
    patch = config.deep_merge(CAPABILITIES["existing-cluster"], {"inference": {"enabled": True, "existing": True},
                                                                  "addons": {"s3_csi": {"existing": True}, "metrics_server": {"existing": True},
                                                                             "fsx_csi": {"existing": True}}})
    settings, _ = validation.load_settings(patched_context("dev", patch), "dev")
    planned = {a.key: a.existing for a in registry.plan(settings)}
    assert planned["inference"] and planned["s3_csi"] and planned["metrics_server"]


def test_the_serving_teams_namespace_admits_its_endpoints_server_port_and_nothing_else(synth):
    # Beside tenancy's default deny, which the VPC CNI enforces: the endpoint's pods, found by the label the SDK finds
    # them by (HPEndpoint.list_pods), on the port the endpoint's load balancer Service refers to (the official model's
    # modelInvocationPort), from any address.
    import importlib.metadata

    from manifests import endpoint as endpoint_manifest
    from manifests import tenancy
    from tests.manifests.official import model_module

    sdk = importlib.metadata.distribution("sagemaker-hyperpod").locate_file("sagemaker/hyperpod/inference/hp_endpoint.py").read_text()
    assert f'labels.get("{tenancy.ENDPOINT_POD_LABEL}", None)' in sdk
    port_field = model_module("sagemaker/hyperpod/inference/config/hp_endpoint_config.py").ModelInvocationPort.model_fields["name"]
    assert "referred to by the Load Balancer Service" in port_field.description
    s = synth("inference")
    (endpoint,) = endpoint_manifest.objects(s.settings, image="111111111111.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0")
    namespace = endpoint_manifest.namespace(s.settings)
    policies = [m for m in s.manifests("addons") if m["kind"] == "NetworkPolicy"]
    (opening,) = [m for m in policies if m["metadata"]["name"] == tenancy.ENDPOINT_POLICY]
    assert opening["metadata"]["namespace"] == endpoint["metadata"]["namespace"] == namespace
    assert opening["spec"] == {"podSelector": {"matchLabels": {"app": endpoint["metadata"]["name"]}}, "policyTypes": ["Ingress"],
                               "ingress": [{"ports": [{"protocol": "TCP", "port": endpoint["spec"]["worker"]["modelInvocationPort"]["containerPort"]}]}]}
    # The namespace's default deny stays beside it; another team's namespace gets no opening.
    assert {m["metadata"]["name"] for m in policies if m["metadata"]["namespace"] == namespace} == {
        tenancy.ISOLATION_POLICY, tenancy.EGRESS_POLICY, tenancy.ENDPOINT_POLICY}
    # validate no longer says the load balancer reaches no replica.
    _, warnings, _ = _load({})
    assert not any("denies ingress" in w for w in warnings)


def test_accept_proves_the_inference_operators_controller_runs_and_reaches_no_instance_metadata():
    from cli.accept import software

    settings, _, _ = _load({})
    assert ("inference operator", REFERENCE["execution_role"]["namespace"], REFERENCE["execution_role"]["service_account"]) in software.agents(settings)
    assert not any(what == "inference operator" for what, _, _ in software.agents(validation.load_settings(patched_context("dev", {}), "dev")[0]))


def test_prod_pins_the_version_the_quick_setup_installs_for_the_day_it_turns_serving_on():
    from tests.conftest import CONTEXT

    prod, _ = validation.load_settings(CONTEXT, "prod")
    assert not prod.inference.enabled and prod.inference.version == REFERENCE["quick_setup_version"]
