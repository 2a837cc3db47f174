"""The review's findings as SARIF 2.1.0, the format code-scanning tools take (GitHub code
scanning, Azure DevOps, most review bots): one run, one rule per kind of finding, each result
located in its template file and named by its construct path."""

from __future__ import annotations

import re

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "note": "note"}


def _finding(rule: str, level: str, message: str, stack: str | None = None, where: str | None = None) -> dict:
    result = {"ruleId": rule, "level": _LEVEL[level], "message": {"text": message}}
    if stack:
        location = {"physicalLocation": {"artifactLocation": {"uri": f"{stack}.template.json"}}}
        if where:
            location["logicalLocations"] = [{"fullyQualifiedName": where, "kind": "resource"}]
        result["locations"] = [location]
    return result


def findings(report: dict) -> list[dict]:
    out = [
        _finding(f"{e['pack']}/{e['rule']}", "error", f"{e['rule']} on {e['construct']} (unacknowledged)", e["construct"].split("/")[0], e["construct"])
        for e in report["nag"]["errors"]
    ]
    out += [
        _finding(f"cfn-lint/{f['rule']}", f["level"] if f["level"] != "info" else "note", f["message"], f["stack"], f["path"] or None)
        for f in report["cfn_lint"]
        if not f["accepted"]
    ]
    iam = report["iam"]
    out += [_finding("iam/unknown-action", "error", f"{u['action']} is not an action in the AWS Service Authorization Reference", u["role"].split("/")[0], u["role"]) for u in iam["unknown_actions"]]
    out += [
        _finding("iam/mutating-on-any-resource", "warning", f"{row['level']} access on Resource '*': {', '.join(row['actions'])}", row["role"].split("/")[0], row["role"])
        for row in iam["on_any_resource"]
    ]
    risk = report["risk"]
    out += [
        _finding("exposure/public-endpoint", "warning" if any(c.endswith("/0") for c in e["cidrs"]) else "note",
                 f"public Kubernetes API endpoint admits {', '.join(e['cidrs'])}", e["stack"], e["resource"])
        for e in risk["public_endpoints"]
    ]
    out += [
        _finding("exposure/open-ingress", "warning", f"admits {r['cidr']} (outside the VPC) on {r['ports']}", r["stack"], r["resource"])
        for r in risk["open_ingress"]
    ]
    for line in (report.get("changes") or {}).get("callouts", []):
        kind = re.match(r"([A-Z ]+):", line)
        rule = "change/" + (kind.group(1).strip().lower().replace(" ", "-") if kind else "callout")
        out.append(_finding(rule, "error" if line.startswith("REFUSED") else "warning", line))
    return out


def log(report: dict) -> dict:
    results = findings(report)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "hyperpod-cdk review",
                        "rules": [{"id": rule} for rule in sorted({r["ruleId"] for r in results})],
                    }
                },
                "results": results,
            }
        ],
    }
