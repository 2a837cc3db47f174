"""preflight on a volume key config names (hyperpod.volume_encryption.kms_key_arn), against moto's
KMS: what HyperPod's customer managed key page (smcluster-cmk) asks of it."""

from __future__ import annotations

import json

from cli import preflight
from infra import validation
from tests.cli.test_preflight import aws  # noqa: F401 - preflight's moto account, a fixture
from tests.conftest import patched_context


def _settings(arn: str):
    patch = {"hyperpod": {"continuous_provisioning": True, "volume_encryption": {"kms_key_arn": arn}}}
    return validation.load_settings(patched_context("dev", patch), "dev")[0]


def _key(aws, policy: dict | None = None) -> str:
    kms = aws("kms")
    key = kms.create_key(**({"Policy": json.dumps(policy)} if policy else {}))["KeyMetadata"]
    return key["Arn"]


def test_a_key_whose_policy_delegates_to_iam_passes(aws):
    (r,) = preflight.check_volume_key(_settings(_key(aws)), aws)  # KMS's default policy: the account's root, kms:*
    assert r.status == "pass" and "symmetric" in r.detail


def test_an_encryption_context_condition_fails(aws):
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111111111111:root"}, "Action": "kms:*", "Resource": "*"},
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111111111111:role/exec"}, "Action": "kms:CreateGrant", "Resource": "*",
         "Condition": {"StringEquals": {"kms:EncryptionContext:team": "research"}}}]}
    (r,) = preflight.check_volume_key(_settings(_key(aws, policy)), aws)
    assert r.status == "fail" and "encryption context" in r.detail


def test_a_policy_that_names_no_one_the_stack_can_grant_warns(aws):
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111111111111:role/KeyAdmin"}, "Action": "kms:*", "Resource": "*"}]}
    (r,) = preflight.check_volume_key(_settings(_key(aws, policy)), aws)
    assert r.status == "warn" and "kms:CreateGrant" in r.action


def test_a_disabled_or_missing_key_fails(aws):
    arn = _key(aws)
    aws("kms").disable_key(KeyId=arn.rsplit("/", 1)[1])  # moto takes the id here, not the ARN
    (r,) = preflight.check_volume_key(_settings(arn), aws)
    assert r.status == "fail" and "Disabled" in r.detail
    (r,) = preflight.check_volume_key(_settings("arn:aws:kms:us-east-1:111111111111:key/00000000-0000-0000-0000-000000000000"), aws)
    assert r.status == "fail" and "cannot be read here" in r.detail


def test_nothing_is_asked_without_a_named_key(aws):
    assert preflight.check_volume_key(validation.load_settings(patched_context("dev", {}), "dev")[0], aws) == []
