"""Several environments side by side: which ones a command runs on, and the table of them.

`validate`, `review` and `upgrade-plan` take any number of environments (`-c env=a -c env=b`,
as cdk takes `-c`, or `--all`) and end with one row per environment: where it deploys, its
Kubernetes version and that version's EKS support (infra/versions.py, with its dated source),
the HyperPod chart revision, the add-on pins, and what it costs a month by its last review
(cli/review/cost.py), where that review was made of the config as it is now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from infra import config, versions


def names(named: list[str], every: bool, context: dict) -> list[str]:
    """The environments a fleet command runs on: those named, in the order given; every one in
    cdk.json with --all; dev where none is named."""
    if not every:
        return named or [config.DEFAULT_ENV]
    found = config.environment_names(context)
    if not found:
        raise config.ConfigError(["environments: missing from cdk.json context (or not an object); add at least one environment block"])
    return found


def last_review(out_root: Path, context: dict, env: str) -> dict | str:
    """The review `hyperpod-cdk review` (or `make synth`) last wrote of `env` (review-<env>.json
    in `out_root`), where it was made of the config as it is now; else why there is none."""
    from cli.review import config_diff

    path = out_root / f"review-{env}.json"
    if not path.is_file():
        return f"no review of {env} in {path.parent.name}/"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"{path.name} does not read as a review"
    if not isinstance(report, dict) or report.get("env") != env or report.get("config_fingerprint") != config_diff.fingerprint(context, env):
        return f"{path.name} is a review of another config than cdk.json's {env} now"
    return report


@dataclass(frozen=True)
class Row:
    env: str
    where: str  # account/region
    kubernetes: str
    support: str  # standard | extended | outside
    tier: str  # the cluster's support tier and deletion protection (eks.upgrade_policy, eks.deletion_protection)
    chart: str
    monthly: str
    addons: str  # last: the longest cell


def _addon_pins(settings: config.Settings) -> str:
    from cli.upgrade_plan import addons_of

    made = addons_of(settings)
    pinned = [f"{a.name.removeprefix('amazon-sagemaker-hyperpod-')} {a.pinned}" for a in made if a.pinned]
    unpinned = len(made) - len(pinned)
    return ", ".join(pinned + ([f"{unpinned} at EKS's default"] if unpinned else [])) or "none"


def _monthly(report: dict | str | None) -> str:
    if not isinstance(report, dict):
        return "not reviewed"
    cost = report["cost"]
    if cost["monthly"] is None:
        return "no total"
    most = f" to ${cost['monthly_max']:,.0f}" if cost.get("monthly_max") else ""
    return f"${cost['monthly']:,.0f}{most}"


def tier(settings: config.Settings) -> str:
    """EXTENDED or STANDARD, and whether EKS refuses to delete the cluster; an existing cluster's are its own."""
    if settings.uses_existing_cluster:
        return "its own"
    return f"{settings.eks.upgrade_policy}, {'protected' if settings.eks_deletion_protection else 'deletable'}"


def row(settings: config.Settings, report: dict | str | None) -> Row:
    """One environment's row; `report` its review (a line saying why there is none, or None)."""
    version = settings.eks.version
    return Row(settings.env_name, f"{settings.account}/{settings.region}", version, versions.support_status(version), tier(settings),
               settings.hyperpod.helm_chart.revision[:12], _monthly(report), _addon_pins(settings))


HEADER = Row("environment", "account/region", "Kubernetes", "support", "tier", "chart", "cost/month", "add-on pins")


def table(rows: list[Row]) -> str:
    """The rows under a header, in aligned columns, and the sources of the figures."""
    cells = [list(vars(r).values()) for r in [HEADER, *rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"support: EKS's ({versions.EKS_SUPPORT_SOURCE}); tier: eks.upgrade_policy, and whether eks.deletion_protection "
                 "refuses a delete; cost/month: the environment's "
                 "last review of this config (cli/review/cost.py)")
    return "\n".join(lines)
