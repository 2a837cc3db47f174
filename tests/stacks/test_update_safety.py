"""Everyday changes must not replace a GPU cluster: compared on the synthesized templates,
with the create-only properties taken from cfn-lint's resource schemas."""

from __future__ import annotations

import json
import shutil

import pytest

from cli.review import replacement
from stacks import lifecycle as lifecycle_module
from tests.conftest import CONTEXT, _synthesize

CLUSTERS = (("hyperpod", "AWS::SageMaker::Cluster"), ("cluster", "AWS::EKS::Cluster"))
DEV_GROUPS = CONTEXT["environments"]["dev"]["hyperpod"]["instance_groups"]


def _with_groups(groups):
    return {"hyperpod": {"instance_groups": groups}}


def _group(name, **changes):
    (g,) = [dict(g) for g in DEV_GROUPS if g["name"] == name]
    return {**g, **changes}


# (before, after) patches over dev
CHANGES = {
    "raise a group's count": (None, _with_groups([_group("system"), _group("gpu", count=3)])),
    "lower a group's count": (
        _with_groups([_group("system"), _group("gpu", count=3)]),
        _with_groups([_group("system"), _group("gpu", count=2)]),
    ),
    "add an instance group": (
        None,
        _with_groups([*DEV_GROUPS, {"name": "gpu-extra", "instance_type": "ml.g5.12xlarge", "count": 2}]),
    ),
}


def _clusters(s) -> dict:
    out = {}
    for suffix, type_ in CLUSTERS:
        (item,) = [(k, r) for k, r in s.templates[suffix]["Resources"].items() if r["Type"] == type_]
        out[type_] = item
    return out


def _assert_no_replacement(base, changed):
    before, after = _clusters(base), _clusters(changed)
    for type_ in before:
        (old_id, old), (new_id, new) = before[type_], after[type_]
        assert old_id == new_id, f"{type_} logical id changed"
        assert replacement.replaced_by(old, new) == [], type_


def test_the_schemas_list_what_replaces_each_cluster():
    assert "/properties/ClusterName" in replacement.create_only_pointers("AWS::SageMaker::Cluster")
    assert "/properties/VpcConfig" in replacement.create_only_pointers("AWS::SageMaker::Cluster")
    assert "/properties/Name" in replacement.create_only_pointers("AWS::EKS::Cluster")


@pytest.mark.parametrize("change", CHANGES)
def test_everyday_change_replaces_neither_cluster(synth, change):
    before, after = CHANGES[change]
    base, changed = synth("dev", before), synth("dev", after)
    assert _clusters(base)["AWS::SageMaker::Cluster"][1] != _clusters(changed)["AWS::SageMaker::Cluster"][1]
    _assert_no_replacement(base, changed)


def test_changing_lifecycle_scripts_replaces_neither_cluster(synth, tmp_path, monkeypatch):
    scripts = tmp_path / "scripts"
    shutil.copytree(lifecycle_module.LIFECYCLE_SCRIPTS, scripts)
    (scripts / "on_create.sh").write_text((scripts / "on_create.sh").read_text() + "\necho extra step\n")
    monkeypatch.setattr(lifecycle_module, "LIFECYCLE_SCRIPTS", scripts)
    changed = _synthesize(CONTEXT, "dev", tmp_path / "out")
    base = synth("dev")
    old = json.dumps(_clusters(base)["AWS::SageMaker::Cluster"][1]["Properties"]["InstanceGroups"][0]["LifeCycleConfig"])
    new = json.dumps(_clusters(changed)["AWS::SageMaker::Cluster"][1]["Properties"]["InstanceGroups"][0]["LifeCycleConfig"])
    assert old != new  # the new version is visible in cdk diff
    _assert_no_replacement(base, changed)


def test_renaming_the_hyperpod_cluster_is_reported_as_a_replacement(synth):
    base, changed = synth("dev"), synth("dev", {"hyperpod": {"cluster_name": "renamed-hp"}})
    (_, old), (_, new) = _clusters(base)["AWS::SageMaker::Cluster"], _clusters(changed)["AWS::SageMaker::Cluster"]
    assert replacement.replaced_by(old, new) == ["/properties/ClusterName"]
