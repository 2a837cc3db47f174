"""Read a synthesized cloud assembly and summarize it for a human reviewer.

`python -m infra.review cdk.out` prints the stacks in deploy order with resource counts,
the cdk-nag results (and every acknowledgment with its reason) and the cfn-lint findings.
It exits non-zero on any unacknowledged nag error or cfn-lint error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


# The cdk-nag packs infra.compliance adds; other validation plugins are not ours to report.
PACK_NAMES = ("AwsSolutions", "NIST.800.53.R5")

# cfn-lint warnings we accept on purpose, with why, and the message each must match.
# Anything else is shown as a finding.
ACCEPTED_LINT_WARNINGS = {
    "W3010": "availability zones are explicit by design: synth stays offline and GPU capacity is AZ-specific",
    "W3005": "redundant DependsOn inside CDK-built custom-resource providers (kubectl, bucket deployment, auto-delete)",
}
_ACCEPTED_MESSAGES = {"W3010": r"availability zones", "W3005": r"^'\w*(ServiceRole|CustomResourceProviderRole)\w*' dependency"}


@dataclass
class StackSummary:
    name: str
    template: dict
    depends_on: list[str]

    @property
    def resources(self) -> dict:
        return self.template.get("Resources", {})

    def counts(self) -> Counter:
        return Counter(r["Type"] for r in self.resources.values())


@dataclass
class NagSummary:
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (pack, rule, construct)
    acknowledged: list[tuple[str, str, str, str]] = field(default_factory=list)  # (+ reason)


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


def load_stacks(outdir: Path) -> list[StackSummary]:
    """The stacks of the assembly, in deploy order (dependencies first)."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    stacks = {}
    for name, art in manifest["artifacts"].items():
        if art["type"] != "aws:cloudformation:stack":
            continue
        template = json.loads((outdir / art["properties"]["templateFile"]).read_text())
        deps = [d for d in art.get("dependencies", []) if manifest["artifacts"].get(d, {}).get("type") == "aws:cloudformation:stack"]
        stacks[name] = StackSummary(name, template, deps)
    ordered, seen = [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for dep in stacks[name].depends_on:
            visit(dep)
        ordered.append(stacks[name])

    for name in stacks:
        visit(name)
    return ordered


def load_nag(outdir: Path) -> NagSummary:
    summary = NagSummary()
    report_file = outdir / "validation-report.json"
    if not report_file.exists():
        return summary
    for plugin in json.loads(report_file.read_text())["pluginReports"]:
        if plugin["pluginName"] not in PACK_NAMES:
            continue
        for v in plugin["violations"]:
            if v.get("severity") == "error":
                for c in v["violatingConstructs"]:
                    summary.errors.append((plugin["pluginName"], v["ruleName"], c["constructPath"]))
        for v in plugin.get("suppressedViolations", []):
            for c in v["violatingConstructs"]:
                summary.acknowledged.append((plugin["pluginName"], v["ruleName"], c["constructPath"], v.get("reason", "")))
    return summary


def lint(outdir: Path, stacks: list[StackSummary]) -> list[LintFinding]:
    """cfn-lint with its bundled resource schemas, over every template."""
    from cfnlint.api import ManualArgs, lint_file  # slow import: only when linting

    findings = []
    for stack in stacks:
        path = outdir / f"{stack.name}.template.json"
        for match in lint_file(path, config=ManualArgs(regions=[_region_of(path)])):
            findings.append(
                LintFinding(
                    rule=match.rule.id,
                    level=_level(match.rule.id),
                    message=match.message,
                    stack=stack.name,
                    path="/".join(str(p) for p in (match.path or [])),
                )
            )
    return findings


def _region_of(path: Path) -> str:
    manifest = json.loads((path.parent / "manifest.json").read_text())
    for art in manifest["artifacts"].values():
        if art.get("properties", {}).get("templateFile") == path.name:
            return art["environment"].rsplit("/", 1)[-1]
    return "us-east-1"


def _level(rule_id: str) -> str:
    return {"E": "error", "W": "warning", "I": "info"}.get(rule_id[0], "error")


def render(outdir: Path, *, with_lint: bool = True) -> tuple[str, bool]:
    """The review text, and whether the assembly passes (no nag or lint errors)."""
    stacks = load_stacks(outdir)
    nag = load_nag(outdir)
    findings = lint(outdir, stacks) if with_lint else []
    out = [f"Review of {outdir}", "", "Stacks in deploy order:"]
    for i, stack in enumerate(stacks, 1):
        counts = stack.counts()
        top = ", ".join(f"{t.split('::', 1)[1]} {n}" for t, n in counts.most_common(6))
        out.append(f"  {i}. {stack.name}: {sum(counts.values())} resources ({top})")
    out += ["", f"cdk-nag ({', '.join(PACK_NAMES)}): {len(nag.errors)} unacknowledged errors, {len(nag.acknowledged)} acknowledged"]
    for pack, rule, path in nag.errors:
        out.append(f"  ERROR {rule} at {path}")
    by_reason = Counter((rule.split("[")[0], reason) for _, rule, _, reason in nag.acknowledged)
    for (rule, reason), n in sorted(by_reason.items()):
        out.append(f"  ack {rule} x{n}: {reason}")
    lint_errors = [f for f in findings if f.level == "error"]
    other = [f for f in findings if f.level != "error" and not f.accepted]
    accepted = Counter(f.rule for f in findings if f.accepted)
    out += ["", f"cfn-lint: {len(lint_errors)} errors, {len(other)} warnings, {sum(accepted.values())} accepted warnings"]
    for f in lint_errors + other:
        out.append(f"  {f.rule} {f.stack} {f.path}: {f.message}")
    for rule, n in sorted(accepted.items()):
        out.append(f"  accepted {rule} x{n}: {ACCEPTED_LINT_WARNINGS[rule]}")
    ok = not nag.errors and not lint_errors
    out += ["", "PASS" if ok else "FAIL"]
    return "\n".join(out), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.review", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", default="cdk.out", type=Path)
    args = parser.parse_args(argv)
    if not (args.outdir / "manifest.json").exists():
        print(f"error: {args.outdir} has no manifest.json; synthesize first (make synth)", file=sys.stderr)
        return 2
    text, ok = render(args.outdir)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
