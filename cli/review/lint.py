"""cfn-lint over the review's templates, with its bundled resource schemas: the findings, the
warnings accepted on purpose (each with why), and a cache of findings by template text, region and
cfn-lint version, so a change to one stack lints that stack."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from cli.review.assembly import StackSummary, region_of

# cfn-lint warnings we accept on purpose, with why, and the message each must match.
# Anything else is shown as a finding.
ACCEPTED_LINT_WARNINGS = {
    "W3010": "availability zones are explicit by design: synth stays offline and GPU capacity is AZ-specific",
    "W3005": "redundant DependsOn inside CDK-built custom-resource providers (kubectl, bucket deployment, auto-delete, "
    "the readiness gate's waiter state machine) and CDK Pipelines' pipeline on its own role",
    "W8003": "without a prepared chart, every stack carries a rule that is false on purpose: deploy stops at the first "
    "change set with the command that prepares it",
    "E3006": "a resource type missing from cfn-lint's region list, an offline snapshot (in 1.58 us-west-2 lacks "
    "ClusterSchedulerConfig, ap-northeast-1 ComputeQuota): a warning, as validate says; preflight asks the account's "
    "CloudFormation (DescribeType)",
}
# cfn-lint's E3006 for a type that exists, but not in its list for the template's region.
_REGION_SNAPSHOT = r"^Resource type '([\w:]+)' does not exist in '[a-z0-9-]+'$"
_ACCEPTED_MESSAGES = {
    "W3010": r"availability zones",
    "W3005": r"^'\w*(ServiceRole|CustomResourceProviderRole|waiterstatemachineRole|PipelineRole)\w*' dependency",
    "W8003": r"^\['not prepared', 'prepared'\] will always return False$",
    "E3006": _REGION_SNAPSHOT,
}


@dataclass
class LintFinding:
    rule: str
    level: str
    message: str
    stack: str
    path: str

    @property
    def accepted(self) -> bool:
        pattern = _ACCEPTED_MESSAGES.get(self.rule)
        return self.level == "warning" and pattern is not None and re.search(pattern, self.message) is not None


# Template findings kept in the lint cache (the least recently used beyond these are removed).
LINT_CACHE_KEEP = 200


def lint(outdir: Path, stacks: list[StackSummary], cache: Path | None = None) -> list[LintFinding]:
    """cfn-lint with its bundled resource schemas, over every template. With `cache`, a
    template linted before (the same text, region and cfn-lint) is not linted again: a
    change to one stack lints that stack."""
    findings = []
    region = region_of(outdir)
    for stack in stacks:
        path = outdir / stack.template_file
        key = _lint_key(path.read_bytes(), region) if cache is not None else None
        kept = cache / f"{key}.json" if key else None
        if kept is not None and kept.is_file():
            kept.touch()
            found = json.loads(kept.read_text())
        else:
            found = _lint_one(path, region)
            if kept is not None:
                cache.mkdir(parents=True, exist_ok=True)
                kept.with_suffix(".part").write_text(json.dumps(found))
                kept.with_suffix(".part").rename(kept)
        findings += [LintFinding(rule=r, level=_level(r, m), message=m, stack=stack.name, path=p) for r, m, p in found]
    if cache is not None and cache.is_dir():
        entries = sorted(cache.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[LINT_CACHE_KEEP:]:
            old.unlink(missing_ok=True)
    return findings


def _lint_one(path: Path, region: str) -> list[tuple[str, str, str]]:
    """cfn-lint's findings on one template, as `cfn-lint --regions REGION FILE` gives them."""
    from cfnlint.runner.template.runner import run_template_by_file_path  # slow import: only when linting

    runner = _cfn_lint(region)
    return [
        (match.rule.id, match.message, "/".join(str(p) for p in (match.path or [])))
        for match in run_template_by_file_path(str(path), runner.config, runner.rules, ignore_bad_template=False)
    ]


@functools.cache
def _cfn_lint(region: str):
    """cfn-lint's runner for `region`, made once per process: making one loads every rule (about
    0.4 s, as long as linting a small template), which cfn-lint's lint_file does per file. Each
    template's own cfn-lint metadata is read per template (ConfigMixIn.set_template_args)."""
    from cfnlint.config import ConfigMixIn, ManualArgs
    from cfnlint.runner.cli import Runner

    return Runner(ConfigMixIn([], **ManualArgs(regions=[region])))


def _lint_key(template: bytes, region: str) -> str:
    import hashlib
    from importlib.metadata import version

    return hashlib.sha256(template + f"\n{region}\ncfn-lint=={version('cfn-lint')}".encode()).hexdigest()[:32]


def _level(rule_id: str, message: str) -> str:
    found = re.search(_REGION_SNAPSHOT, message) if rule_id == "E3006" else None
    if found:
        from infra import cfn_schema

        # A type some region lists: whether this region offers it is the account's answer
        # (preflight), not the snapshot's. A type no region lists is an error.
        return "warning" if cfn_schema.regions_with([found.group(1)]) else "error"
    return {"E": "error", "W": "warning", "I": "info"}.get(rule_id[0], "error")
