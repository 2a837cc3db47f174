"""eks.existing_cluster in the config: what it needs, what it makes moot (the corpus in
tests/bad_inputs holds one case per refusal; these are the rules around them)."""

from __future__ import annotations

import pytest

from infra import config, validation
from tests.conftest import CAPABILITIES, patched_context


def _load(extra: dict | None = None):
    return validation.load_settings(patched_context("dev", config.deep_merge(CAPABILITIES["existing-cluster"], extra or {})), "dev")


def test_an_existing_cluster_needs_no_new_admin_and_its_endpoint_is_not_ours_to_warn_about():
    settings, warnings = _load({"eks": {"admin_principal_arns": []}})
    assert settings.eks_cluster_name == "platform-shared" and settings.core_addons_installed == ()
    assert not [w for w in warnings if "public_access_cidrs" in w or "eks.logging" in w]
    # A cluster of ours with the same admins is refused: nobody could run kubectl.
    with pytest.raises(config.ConfigError, match="eks.admin_principal_arns"):
        validation.load_settings(patched_context("dev", {"eks": {"admin_principal_arns": []}}), "dev")


@pytest.mark.parametrize(
    "name, ok",
    [("a" * 100, True), ("platform_shared-2", True), ("0platform", True), ("a" * 101, False), ("_platform", False),
     ("platform shared", False), ("platform/shared", False)],
)
def test_the_name_follows_createclusters_rule_anchored_at_both_ends(name, ok):
    """AWS::EKS::Cluster Name in cfn-lint's schema (1-100 characters, the pattern with an end
    anchor added: CreateCluster's reference allows only letters, digits, '-' and '_')."""
    extra = {"eks": {"existing_cluster": {"name": name}}}
    if ok:
        assert _load(extra)[0].eks_cluster_name == name
    else:
        with pytest.raises(config.ConfigError) as err:
            _load(extra)
        assert [p for p in err.value.problems if p.startswith("dev: eks.existing_cluster.name: ")]


def test_the_pod_identity_agent_is_pinned_only_where_it_is_installed():
    pin = {"eks": {"core_addons": {"pod_identity_agent": {"version": "v1.3.4-eksbuild.1"}}}}
    with pytest.raises(config.ConfigError, match="eks.core_addons.pod_identity_agent: .*install_pod_identity_agent true"):
        _load(pin)
    settings, _ = _load(config.deep_merge(pin, {"eks": {"existing_cluster": {"install_pod_identity_agent": True}}}))
    assert settings.core_addons_installed == ("pod_identity_agent",)
