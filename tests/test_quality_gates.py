"""The bars every environment must clear: cdk-nag and cfn-lint."""

from __future__ import annotations

import pytest

from cli import review
from tests.conftest import GATED, gated_templates


@pytest.mark.parametrize("env", GATED)
def test_no_unacknowledged_nag_errors_in_either_pack(synth, env):
    nag = review.load_nag(synth(env).outdir)
    assert nag.errors == []


@pytest.mark.parametrize("env", GATED)
def test_both_nag_packs_ran(synth, env):
    names = {p["pluginName"] for p in synth(env).report["pluginReports"]}
    assert set(review.PACK_NAMES) <= names


@pytest.mark.parametrize("env", GATED)
def test_every_acknowledgment_is_scoped_and_gives_a_specific_reason(synth, env):
    nag = review.load_nag(synth(env).outdir)
    assert nag.acknowledged
    for pack, rule, path, reason in nag.acknowledged:
        assert len(reason) >= 40, (rule, path, reason)
        assert path.startswith(f"hyperpod-{synth(env).settings.env_name}-"), path


def _lint(job: tuple[str, list[str]]) -> list:
    """cfn-lint over some stacks of one assembly, in a worker process."""
    from pathlib import Path

    outdir, names = Path(job[0]), job[1]
    return review.lint(outdir, [s for s in review.load_stacks(outdir) if s.name in names])


@pytest.fixture(scope="session")
def lint_findings(synth) -> dict:
    """cfn-lint of every gated config, two at a time (cfn-lint is pure Python: a process per core);
    a capability's templates that equal dev's are dev's findings."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = {
        name: (str(synth(name).outdir), [synth(name).settings.stack_name(k) for k in gated_templates(synth, name)])
        for name in GATED
    }
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(zip(jobs, pool.map(_lint, jobs.values())))


@pytest.mark.parametrize("env", GATED)
def test_cfn_lint_finds_no_errors_and_only_accepted_warnings(lint_findings, env):
    findings = lint_findings[env]
    assert [f for f in findings if f.level == "error"] == []
    assert [f for f in findings if not f.accepted and f.level != "info"] == []


def test_review_lists_stacks_in_deploy_order(synth):
    report = review.build(synth("dev").outdir, with_lint=False)
    text = review.to_markdown(report)
    assert report["pass"]
    assert text.index("hyperpod-dev-network") < text.index("hyperpod-dev-cluster")
