"""The add-on versions as data: which Kueue task governance ships, where its CRD migration
sits, and what the training operator's versions say about IAM. Each record names its source
and the day it was read; the pages are online only, so the tests hold the data to its shape
and to what the code does with it."""

from __future__ import annotations

import re

import pytest

from infra import versions
from tests.conftest import ROOT

RELEASES = (*versions.TASK_GOVERNANCE_RELEASES, *versions.TRAINING_OPERATOR_RELEASES, *versions.ADDON_RELEASES)


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: f"{type(r).__name__}-{r.version}")
def test_every_add_on_release_names_its_source_and_the_day_it_was_read(release):
    assert release.source and re.fullmatch(r"\d{4}-\d{2}-\d{2}", release.seen)


def test_task_governance_v1_6_ships_kueue_0_19_2_and_v1_3_the_line_the_training_operator_recommends():
    # Upgrade page: "Version v1.6.0-eksbuild.1 packages Kueue v0.19.2". The training operator page
    # recommends Kueue v0.12.2 and v0.12.3 and needs task governance v1.3.0 or newer.
    kueue = {r.version: r.kueue for r in versions.TASK_GOVERNANCE_RELEASES}
    assert kueue["v1.6.0-eksbuild.1"] == "0.19.2"
    assert all(k.startswith(kueue["v1.3.x"].removesuffix("x")) for k in versions.TRAINING_OPERATOR_KUEUE_RECOMMENDED)
    assert kueue["v1.5.0-eksbuild.1"] is None  # no source names it; the record says what is known


@pytest.mark.parametrize(
    ("before", "after", "crosses"),
    [
        ("v1.3.0-eksbuild.1", "v1.5.0-eksbuild.1", True),
        ("v1.3.1-eksbuild.2", "v1.6.0-eksbuild.1", True),
        ("v1.2.2-eksbuild.1", "v1.6.0-eksbuild.1", True),
        ("v1.5.0-eksbuild.1", "v1.6.0-eksbuild.1", False),  # "does not migrate CRD storage versions"
        ("v1.3.0-eksbuild.1", "v1.3.1-eksbuild.1", False),
        ("v1.6.0-eksbuild.1", "v1.3.0-eksbuild.1", False),
        (None, "v1.6.0-eksbuild.1", None),  # EKS chose the deployed one: only the cluster knows
        (None, "v1.3.0-eksbuild.1", False),
        ("v1.3.0-eksbuild.1", None, False),
    ],
)
def test_the_kueue_crd_migration_lies_between_v1_3_and_v1_5(before, after, crosses):
    assert versions.crosses_task_governance_migration(before, after) is crosses


def test_the_migration_steps_back_up_before_they_delete_and_restore_after_the_update():
    # Upgrade page, "Upgrade from v1.3.x to v1.5 or later", steps 2-6.
    text = " | ".join(versions.TASK_GOVERNANCE_MIGRATION_STEPS)
    order = [text.index(s) for s in ("back up", "delete", "update-addon", "webhook", "restore")]
    assert order == sorted(order) and '["v1beta2"]' in text
    assert "cohorts.kueue.x-k8s.io" in versions.TASK_GOVERNANCE_MIGRATION_ERROR


def test_the_default_training_operator_publishes_no_iam_requirement_so_no_add_on_asks_for_an_inline_association():
    # awsome-distributed-ai PR 1076: v1.2.1-eksbuild.1, the default for Kubernetes 1.28-1.35, has
    # requiresIamPermissions false, and CreateAddon rejects an inline Pod Identity association for it.
    (default,) = [r for r in versions.TRAINING_OPERATOR_RELEASES if r.default]
    assert (default.version, default.requires_iam_permissions) == ("v1.2.1-eksbuild.1", False)
    inline = [p.name for p in (ROOT / "addons").glob("*.py") if re.search(r"pod_identity_associations|PodIdentityAssociations", p.read_text())]
    assert inline == []


def test_the_offline_add_on_table_names_one_version_per_add_on_and_kubernetes_version():
    seen = [(r.addon, k) for r in versions.ADDON_RELEASES for k in r.kubernetes]
    assert len(seen) == len(set(seen))
    assert all(re.fullmatch(r"v\d+\.\d+\.\d+-eksbuild\.\d+", r.version) for r in versions.ADDON_RELEASES)
    # kube-proxy follows the Kubernetes minor version it is listed for.
    assert all(r.version.startswith(f"v{r.kubernetes[0]}.") for r in versions.ADDON_RELEASES if r.addon == "kube-proxy")


def test_prod_pins_every_add_on_it_installs_to_the_version_a_dated_source_publishes_for_its_kubernetes():
    # The pins are the rows of the offline table for prod's Kubernetes version (each row names its
    # source); an add-on no source publishes a version of for it is named with why, never guessed.
    from cli.upgrade_plan import addons_of
    from infra import validation
    from tests.conftest import CONTEXT

    prod = validation.load_settings(CONTEXT, "prod")[0]
    for addon in addons_of(prod):
        row = versions.offline_addon_release(addon.name, prod.eks.version)
        if row is not None:
            assert addon.pinned == row.version, addon.name
        else:
            assert addon.pinned is None and addon.name in versions.NO_OFFLINE_VERSION, addon.name
    assert set(versions.NO_OFFLINE_VERSION) <= {a.name for a in addons_of(prod)} | {"aws-fsx-csi-driver"}


def test_each_kube_proxy_row_is_the_build_of_its_own_minor_as_the_eks_table_pairs_them():
    # EKS's kube-proxy table (managing-kube-proxy) pairs each Kubernetes version with a build of
    # that minor; the rule below reads the minor from the build's own version.
    rows = [r for r in versions.ADDON_RELEASES if r.addon == "kube-proxy"]
    assert rows and all(r.kubernetes == (".".join(r.version.lstrip("v").split(".")[:2]),) for r in rows)


@pytest.mark.parametrize("pinned", ["v1.35.3-eksbuild.2", "v1.30.14-eksbuild.28", "v1.33.10-eksbuild.2"])
def test_a_kube_proxy_built_for_another_minor_is_off_the_clusters_version(pinned):
    # Kubernetes' version-skew policy: kube-proxy never newer than the API server; EKS's table: the
    # build of the cluster's own minor. 1.35 is newer, 1.30 four minors older, 1.33 not EKS's pair.
    (off,) = versions.pins_off_version("1.34", {"kube-proxy": pinned})
    assert off.known and f"is built for Kubernetes {pinned[1:5]}, not 1.34" in off.reason
    assert "the table's build for 1.34 is v1.34.6-eksbuild.2" in off.reason and "version-skew-policy" in off.reason
    assert versions.pins_off_version("1.34", {"kube-proxy": "v1.34.1-eksbuild.1"}) == []


def test_coredns_is_held_to_its_release_lines_versions_and_what_no_row_settles_is_unknown():
    assert versions.pins_off_version("1.34", {"coredns": "v1.13.2-eksbuild.4", "cert-manager": "v1.18.2-eksbuild.2"}) == []
    (off,) = versions.pins_off_version("1.34", {"coredns": "v1.11.4-eksbuild.2"})
    # The current table lists v1.11 for 1.30-1.32, an older copy for 1.29-1.32 as well.
    assert off.known and "is for Kubernetes 1.29, 1.30, 1.31, 1.32, not 1.34" in off.reason
    # No row for 1.36; a cert-manager row says where references ran it, not where it is published.
    unknown = versions.pins_off_version("1.36", {"coredns": "v1.13.2-eksbuild.4", "cert-manager": "v1.18.2-eksbuild.2",
                                                 "vpc-cni": "v1.20.1-eksbuild.3"})
    assert [(o.addon, o.known) for o in unknown] == [("cert-manager", False), ("coredns", False), ("vpc-cni", False)]
    assert all("cannot be known offline" in o.reason and "DescribeAddonVersions" in o.reason for o in unknown)


def test_the_vpc_cni_build_eks_lists_for_1_34_meets_hyperpods_floor_and_goes_with_its_versions():
    # HyperPod's prerequisites page: VPC CNI 1.18.3 or later; EKS's VPC CNI table: v1.21.1-eksbuild.7
    # for 1.29-1.35. Past the table's last version a pin is left to the account.
    row = versions.offline_addon_release("vpc-cni", "1.34")
    assert row is not None and "managing-vpc-cni" in row.source
    assert versions.addon_version_at_least(row.version, "v" + ".".join(map(str, versions.VPC_CNI_MIN_FOR_HYPERPOD)))
    assert versions.pins_off_version("1.34", {"vpc-cni": row.version}) == []
    (later,) = versions.pins_off_version("1.36", {"vpc-cni": row.version})
    assert not later.known and "its source lists it for 1.29, 1.30, 1.31, 1.32, 1.33, 1.34, 1.35 only" in later.reason


def test_a_coredns_pin_from_an_older_copy_of_the_table_warns_where_that_copy_listed_it_and_is_refused_elsewhere():
    # EKS's CoreDNS table (managing-coredns): an older English copy lists v1.12.4-eksbuild.1 for 1.33 and 1.34 and
    # v1.10.1-eksbuild.38 for 1.28; the current one v1.13.2-eksbuild.4 for 1.33-1.35. Each copy lists every version it covers.
    older = {r.version: r for r in versions.SUPERSEDED_ADDON_RELEASES}
    assert older["v1.12.4-eksbuild.1"].kubernetes == ("1.33", "1.34") and "managing-coredns" in older["v1.12.4-eksbuild.1"].source
    (off,) = versions.pins_off_version("1.34", {"coredns": "v1.12.4-eksbuild.1"})
    assert not off.known and "older copy of EKS's table lists for Kubernetes 1.34" in off.reason and "v1.13.2-eksbuild.4" in off.reason
    (off,) = versions.pins_off_version("1.35", {"coredns": "v1.12.4-eksbuild.1"})
    assert off.known and "is for Kubernetes 1.33, 1.34, not 1.35" in off.reason
    (off,) = versions.pins_off_version("1.34", {"coredns": "v1.10.1-eksbuild.38"})
    assert off.known and "is for Kubernetes 1.27, 1.28, not 1.34" in off.reason and "older English copy" in off.reason


def test_a_vpc_cni_pin_below_hyperpods_floor_is_refused_with_its_source():
    # HyperPod's EKS prerequisites page: "version 1.18.3 or later"; whatever Kubernetes version.
    (off,) = versions.pins_off_version("1.34", {"vpc-cni": "v1.18.2-eksbuild.9"})
    assert off.known and "1.18.3" in off.reason and "sagemaker-hyperpod-eks-prerequisites" in off.reason
    assert not [o for o in versions.pins_off_version("1.34", {"vpc-cni": "v1.18.3-eksbuild.1"}) if o.known]
