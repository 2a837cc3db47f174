"""Read a synthesized cloud assembly and summarize it for a human reviewer.

`hyperpod-cdk review` (and `make synth`, through `--assembly cdk.out`) prints it and writes
review-<env>.md and .json: the stacks in deploy order with resource counts and their
size against CloudFormation's limits, the cdk-nag results with every acknowledgment and
its reason, the cfn-lint findings, the IAM roles with their managed policies and
wildcards, an estimated deploy plan, and with --against the per-resource changes, with
replacements judged from cfn-lint's create-only properties. The command exits non-zero on
any unacknowledged nag error or cfn-lint error.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


# The cdk-nag packs infra.compliance adds; other validation plugins are not ours to report.
PACK_NAMES = ("AwsSolutions", "NIST.800.53.R5")

# cfn-lint warnings we accept on purpose, with why, and the message each must match.
# Anything else is shown as a finding.
ACCEPTED_LINT_WARNINGS = {
    "W3010": "availability zones are explicit by design: synth stays offline and GPU capacity is AZ-specific",
    "W3005": "redundant DependsOn inside CDK-built custom-resource providers (kubectl, bucket deployment, auto-delete, "
    "the readiness gate's waiter state machine)",
    "W8003": "without a prepared chart, every stack carries a rule that is false on purpose: deploy stops at the first "
    "change set with the command that prepares it",
}
_ACCEPTED_MESSAGES = {
    "W3010": r"availability zones",
    "W3005": r"^'\w*(ServiceRole|CustomResourceProviderRole|waiterstatemachineRole)\w*' dependency",
    "W8003": r"^\['not prepared', 'prepared'\] will always return False$",
}


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


# CloudFormation's per-template limits.
MAX_RESOURCES = 500
MAX_TEMPLATE_BYTES = 1_000_000
WARN_AT = 0.8


def load_warnings(outdir: Path) -> list[str]:
    """The CDK warnings in the assembly (config warnings among them), as the CLI shows them."""
    found = []
    for path in sorted(outdir.glob("*.metadata.json")):
        for entries in json.loads(path.read_text()).values():
            found += [e["data"] for e in entries if e["type"] == "aws:cdk:warning"]
    return found


def build(outdir: Path, *, against: Path | None = None, with_lint: bool = True) -> dict:
    """Every section of the review as plain data (what review.json holds)."""
    from cli import deploy_plan, diff, iam_audit

    stacks = load_stacks(outdir)
    nag = load_nag(outdir)
    findings = lint(outdir, stacks) if with_lint else []
    roles = iam_audit.audit({s.name: s.template for s in stacks})
    total, path = deploy_plan.plan(stacks)
    with_wildcards, role_count = iam_audit.wildcard_figure(roles)
    report = {
        "assembly": str(outdir),
        "warnings": load_warnings(outdir),
        "stacks": [
            {
                "name": s.name,
                "resources": sum(s.counts().values()),
                "by_type": dict(sorted(s.counts().items())),
                "bytes": (outdir / f"{s.name}.template.json").stat().st_size,
            }
            for s in stacks
        ],
        "nag": {
            "errors": [{"pack": p, "rule": r, "construct": c} for p, r, c in nag.errors],
            "acknowledged": [{"pack": p, "rule": r, "construct": c, "reason": why} for p, r, c, why in nag.acknowledged],
        },
        "cfn_lint": [
            {"rule": f.rule, "level": f.level, "stack": f.stack, "path": f.path, "message": f.message, "accepted": f.accepted}
            for f in findings
        ],
        "iam": {
            "roles_with_wildcards": with_wildcards,
            "roles": role_count,
            "detail": [
                {
                    "stack": r.stack,
                    "role": r.path,
                    "managed_policies": r.managed_policies,
                    "wildcards": [
                        {"actions": st.actions, "resources": st.resources}
                        for st in r.statements
                        if st.wildcard_actions or st.wildcard_resources
                    ],
                }
                for r in roles
            ],
        },
        "deploy_plan": {
            "minutes": round(total, 1),
            "critical_path": [
                {"stack": st.stack, "resource": st.logical_id, "type": st.type, "start": round(st.start, 1), "minutes": st.minutes}
                for st in path
                if st.minutes >= 1.0
            ],
        },
    }
    if against is not None:
        region = _region_of(next(outdir.glob("*.template.json")))
        changes = diff.compare(load_stacks(against), stacks, region)
        report["changes"] = [
            {"stack": c.stack, "resource": c.logical_id, "type": c.type, "action": c.action, "because": list(c.because), "critical": c.critical}
            for c in changes
        ]
    report["pass"] = not report["nag"]["errors"] and not [f for f in findings if f.level == "error"]
    return report


def _size_line(stack: dict) -> str:
    r, b = stack["resources"] / MAX_RESOURCES, stack["bytes"] / MAX_TEMPLATE_BYTES
    flag = "  WARNING: above 80% of a CloudFormation limit" if max(r, b) >= WARN_AT else ""
    return f"{stack['resources']}/{MAX_RESOURCES} resources ({r:.0%}), {stack['bytes'] / 1000:.0f}/{MAX_TEMPLATE_BYTES // 1000} KB ({b:.0%}){flag}"


def to_markdown(report: dict) -> str:
    where = os.path.relpath(report["assembly"])
    out = [f"# Review of {report['assembly'] if where.startswith('..') else where}", ""]
    changes = report.get("changes")
    if changes is not None:
        critical = [c for c in changes if c["critical"]]
        for c in critical:
            out.append(f"**{c['action'].upper()}: {c['type']} {c['resource']} in {c['stack']}** ({', '.join(c['because']) or 'removed'})")
        if critical:
            out.append("")
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    out += ["## Stacks in deploy order", ""]
    for i, st in enumerate(report["stacks"], 1):
        out.append(f"{i}. `{st['name']}`: {_size_line(st)}")
        out.append("   " + ", ".join(f"{t.split('::', 1)[1]} {n}" for t, n in st["by_type"].items()))
    nag = report["nag"]
    out += ["", f"## cdk-nag ({', '.join(PACK_NAMES)})", "", f"{len(nag['errors'])} unacknowledged errors, {len(nag['acknowledged'])} acknowledged findings.", ""]
    by_rule = Counter((e["pack"], e["rule"]) for e in nag["errors"])
    for (pack, rule), n in sorted(by_rule.items()):
        out.append(f"- ERROR {pack} {rule} x{n}")
    by_reason: dict[str, Counter] = {}
    for a in nag["acknowledged"]:
        by_reason.setdefault(a["reason"], Counter())[a["rule"].split("[")[0]] += 1
    for reason, rules in sorted(by_reason.items()):
        out.append(f"- acknowledged ({', '.join(f'{r} x{n}' for r, n in sorted(rules.items()))}): {reason}")
    lint_rows = report["cfn_lint"]
    errors = [f for f in lint_rows if f["level"] == "error"]
    other = [f for f in lint_rows if f["level"] != "error" and not f["accepted"]]
    accepted = Counter(f["rule"] for f in lint_rows if f["accepted"])
    out += ["", "## cfn-lint", "", f"{len(errors)} errors, {len(other)} warnings, {sum(accepted.values())} accepted warnings.", ""]
    for f in errors + other:
        out.append(f"- {f['rule']} {f['stack']} {f['path']}: {f['message']}")
    for rule, n in sorted(accepted.items()):
        out.append(f"- accepted {rule} x{n}: {ACCEPTED_LINT_WARNINGS[rule]}")
    iam = report["iam"]
    out += ["", "## IAM roles", "", f"Roles with any wildcard: {iam['roles_with_wildcards']} of {iam['roles']}.", ""]
    for r in iam["detail"]:
        managed = ", ".join(m for p in r["managed_policies"] for m in re.findall(r"policy/(?:service-role/)?([\w-]+)", p)) or "none"
        out.append(f"- `{r['role']}`: managed policies {managed}")
        for w in r["wildcards"]:
            out.append(f"  - wildcard: {', '.join(w['actions'])} on {', '.join(w['resources'])}")
    plan = report["deploy_plan"]
    out += ["", "## Estimated deploy plan", "", f"About {plan['minutes']:.0f} minutes of wall-clock time (typical creation times, cli/deploy_plan.py). It waits on:", ""]
    for st in plan["critical_path"]:
        out.append(f"- {st['start']:>5.1f} min: {st['type']} `{st['resource']}` in {st['stack']} (~{st['minutes']:.0f} min)")
    if changes is not None:
        out += ["", "## Changes against the earlier synth", ""]
        if not changes:
            out.append("No resource changes.")
        for c in changes:
            why = f" (create-only: {', '.join(c['because'])})" if c["because"] else ""
            out.append(f"- {c['action']}: {c['type']} `{c['resource']}` in {c['stack']}{why}")
    out += ["", "PASS" if report["pass"] else "FAIL", ""]
    return "\n".join(out)


def render(outdir: Path, *, with_lint: bool = True, against: Path | None = None) -> tuple[str, bool]:
    """The review text, and whether the assembly passes (no nag or lint errors)."""
    report = build(outdir, against=against, with_lint=with_lint)
    return to_markdown(report), report["pass"]


def write(report: dict, base: Path) -> tuple[Path, Path]:
    """review.md and review.json beside the assembly (`base` without suffix)."""
    md, js = base.with_suffix(".md"), base.with_suffix(".json")
    md.write_text(to_markdown(report))
    js.write_text(json.dumps(report, indent=2))
    return md, js
