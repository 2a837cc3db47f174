"""One identity rule (infra/identity.py): whether two principal ARNs name one principal as IAM
and EKS see it, held against botocore's IAM model, and every field that makes an EKS access
entry read through it. Config-level: no synth."""

from __future__ import annotations

import re

import botocore.session
import pytest

from infra import config, identity, validation
from tests.conftest import patched_context

A = "arn:aws:iam::111111111111:role/"


def _iam_shape(name: str):
    return botocore.session.get_session().get_service_model("iam").shape_for(name)


def _problems(patch: dict) -> list[str]:
    with pytest.raises(config.ConfigError) as exc:
        validation.load_settings(patched_context("dev", patch), "dev")
    return exc.value.problems


@pytest.mark.parametrize("shape", ["roleNameType", "userNameType"])
def test_names_follow_botocores_iam_name_types(shape):
    rule = _iam_shape(shape).metadata
    assert (rule["min"], rule["max"], rule["pattern"]) == (1, identity.NAME_MAX, identity.NAME.pattern)
    kind = "role" if shape == "roleNameType" else "user"
    prefix = f"arn:aws:iam::111111111111:{kind}/"
    longest = "a" * rule["max"]
    assert identity.parse(prefix + longest, (kind,)).name == longest
    with pytest.raises(identity.NotAPrincipal, match="of 65 characters"):
        identity.parse(prefix + longest + "b", (kind,))
    # botocore's \w is Java's, ASCII only.
    with pytest.raises(identity.NotAPrincipal, match="letters, digits and"):
        identity.parse(prefix + "rôle", (kind,))


@pytest.mark.parametrize("path, legal", [("/", True), ("/ops/", True), ("/a/b/c/", True), ("//", False),
                                         ("/" + "p" * 510 + "/", True), ("/" + "p" * 511 + "/", False), ("/a b/", False)])
def test_paths_follow_botocores_path_type(path, legal):
    rule = _iam_shape("pathType").metadata
    assert rule["max"] == identity.PATH_MAX
    # Java's \\uXXXX escapes read the same in Python's re.
    assert (bool(re.fullmatch(rule["pattern"], path)) and len(path) <= rule["max"]) == legal
    arn = A + path[1:] + "Admin"
    if legal:
        assert identity.parse(arn).path == path
    else:
        with pytest.raises(identity.NotAPrincipal):
            identity.parse(arn)


def test_a_path_with_no_name_is_no_role():
    with pytest.raises(identity.NotAPrincipal, match="has a path but no role name"):
        identity.parse(A + "ops/")


def test_one_role_whatever_the_case_of_its_name_or_its_path():
    # IAM User Guide, "IAM identifiers": names are unique within an account whatever the path,
    # and not distinguished by case.
    assert identity.same(A + "Admin", A + "admin")
    assert identity.same(A + "Admin", A + "ops/Admin")
    assert identity.same(A + "ops/ADMIN", A + "team/admin")
    assert not identity.same(A + "Admin", "arn:aws:iam::222222222222:role/Admin")
    assert not identity.same(A + "Admin", "arn:aws-cn:iam::111111111111:role/Admin")
    assert not identity.same(A + "Admin", "arn:aws:iam::111111111111:user/Admin")
    assert not identity.same(A + "Admin", A + "Admins")


def test_the_same_role_as_admin_and_team_principal_is_one_access_entry_too_many():
    lines = _problems({"eks": {"admin_principal_arns": [A + "Admin"]},
                       "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
                                                 "principals": [A + "platform/ADMIN"]}]}})
    assert (f"dev: governance.teams[0].principals[0]: '{A}platform/ADMIN' names the same role as eks.admin_principal_arns[0] "
            f"('{A}Admin'): IAM compares role names without case and whatever their path; EKS gives a principal one access entry") in lines


def test_admins_listed_twice_or_twice_by_path_are_refused():
    assert any(l.startswith("dev: eks.admin_principal_arns[1]:") and "is listed twice (also eks.admin_principal_arns[0])" in l
               for l in _problems({"eks": {"admin_principal_arns": [A + "Admin", A + "Admin"]}}))
    assert any(l.startswith("dev: eks.admin_principal_arns[1]:") and "names the same role" in l
               for l in _problems({"eks": {"admin_principal_arns": [A + "Admin", A + "ops/Admin"]}}))


def test_an_admin_may_be_a_user_a_team_principal_may_not():
    lines = _problems({"eks": {"admin_principal_arns": ["arn:aws:iam::111111111111:user/alice"]},
                       "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "count": 1}],
                                                 "principals": ["arn:aws:iam::111111111111:user/alice"]}]}})
    assert [l for l in lines if "principal" in l] == [
        "dev: governance.teams[0].principals[0]: 'arn:aws:iam::111111111111:user/alice' is not an IAM role ARN "
        "(arn:<partition>:iam::<account>:role/<optional path/>name)"
    ]


def test_the_existing_clusters_kubectl_role_already_has_its_entry():
    import json
    from pathlib import Path

    legal = json.loads((Path(__file__).parents[1] / "legal_inputs" / "existing_cluster_with_its_own_kubectl_role_and_no_new_admins.json").read_text())
    patch = legal["patch"]
    patch["eks"]["admin_principal_arns"] = [A + "PLATFORM-kubectl"]  # the kubectl role is role/path/platform-kubectl
    (line,) = [l for l in _problems(patch) if "admin_principal_arns" in l]
    assert line == (f"dev: eks.admin_principal_arns[0]: '{A}PLATFORM-kubectl' is eks.existing_cluster.kubectl_role_arn, which already "
                    "has an access entry on platform-shared; EKS gives a principal one access entry: leave it out")


def test_an_existing_execution_role_gets_its_entry_from_hyperpod_and_no_second_one():
    # SageMaker API reference, ClusterMetadata.EksRoleAccessEntries: "A list of Amazon EKS IAM
    # role ARNs associated with the cluster. This is created by HyperPod on your behalf".
    docs = botocore.session.get_session().get_service_model("sagemaker").shape_for("ClusterMetadata").members
    assert "created by HyperPod on your behalf" in docs["EksRoleAccessEntries"].documentation
    role = A + "service-role/hyperpod-nodes"
    lines = _problems({"hyperpod": {"existing_execution_role_arn": role, "existing_lifecycle_bucket": "platform-lifecycle-111111111111"},
                       "eks": {"admin_principal_arns": [A + "Admin", A + "HyperPod-Nodes"]}})
    assert (f"dev: eks.admin_principal_arns[1]: '{A}HyperPod-Nodes' is hyperpod.existing_execution_role_arn, the nodes' role, which "
            "HyperPod gives an access entry itself; EKS gives a principal one access entry: leave it out") in lines
