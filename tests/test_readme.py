"""The README stays true: every config field and every stack is documented."""

from __future__ import annotations

from infra.config import field_paths
from infra.naming import STACK_SUFFIXES
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_every_config_field_is_in_the_readme_table():
    missing = [path for path, _ in field_paths() if f"| `{path}` |" not in README]
    assert missing == []


def test_the_two_commands_are_documented():
    assert "make synth" in README and "make test" in README


def test_every_stack_the_app_builds_is_documented(synth):
    for suffix in synth("dev").templates:
        assert f"`<prefix>-<env>-{suffix}`" in README
    assert set(synth("dev").templates) <= set(STACK_SUFFIXES)


def test_the_review_example_has_every_section_the_review_writes(synth):
    from cli import review

    report = review.build(synth("dev").outdir, with_lint=False)
    headings = [line for line in review.to_markdown(report).splitlines() if line.startswith("## ")]
    example = README[README.index("<code>hyperpod-cdk review --env prod</code>"):]
    assert "## What this change does (against main (" in example and "```mermaid" in example
    assert "Against the baseline:" in example and "- Cost: +$" in example
    for heading in headings:
        assert heading in example, heading
