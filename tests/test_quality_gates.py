"""The bars every environment must clear: cdk-nag and cfn-lint."""

from __future__ import annotations

import pytest

from cli import review
from tests.conftest import ENVIRONMENTS


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_no_unacknowledged_nag_errors_in_either_pack(synth, env):
    nag = review.load_nag(synth(env).outdir)
    assert nag.errors == []


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_both_nag_packs_ran(synth, env):
    names = {p["pluginName"] for p in synth(env).report["pluginReports"]}
    assert set(review.PACK_NAMES) <= names


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_acknowledgment_is_scoped_and_gives_a_specific_reason(synth, env):
    nag = review.load_nag(synth(env).outdir)
    assert nag.acknowledged
    for pack, rule, path, reason in nag.acknowledged:
        assert len(reason) >= 40, (rule, path, reason)
        assert path.startswith(f"hyperpod-{env}-"), path


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cfn_lint_finds_no_errors_and_only_accepted_warnings(synth, env):
    s = synth(env)
    findings = review.lint(s.outdir, review.load_stacks(s.outdir))
    assert [f for f in findings if f.level == "error"] == []
    assert [f for f in findings if not f.accepted and f.level != "info"] == []


def test_review_lists_stacks_in_deploy_order(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    text = review.to_markdown(report)
    assert report["pass"]
    assert text.index("hyperpod-dev-network") < text.index("hyperpod-dev-cluster")
