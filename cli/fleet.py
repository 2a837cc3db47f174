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


WIDTH = 120  # the table's most columns: a terminal's, a job summary's code block; the rest goes below it
STOPS_MIN = 12  # the stop-at cell takes what the other columns leave of WIDTH, at least this (every callout is named below)


@dataclass(frozen=True)
class Row:
    env: str
    verdict: str  # PASS | FAIL | refused | left behind | unreviewed
    change: str  # the change's cost an hour (+$), "first deploy", or "-"
    minutes: str  # what the update takes, by the review's plan
    stops: str  # the stop-here callouts by kind, each once (the table cuts them to its width)
    replaces: str  # how many resources the update replaces (a pending replacement)
    gpus: str  # GPUs by type: "32 H100"
    kubernetes: str  # its version, and how far behind the fleet's newest
    support: str  # EKS support on the version, until when
    details: tuple[str, ...] = ()  # below the table: where, tier, chart, cost a month, pins, every callout


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


def gpus(settings: config.Settings) -> str:
    """GPUs (or other accelerators) by type, at the groups' counts: "32 H100"."""
    from infra import catalogue

    by_type: dict[str, int] = {}
    for group in settings.hyperpod.instance_groups:
        kind = catalogue.lookup(group.instance_type)
        if kind and kind.accelerators and isinstance(group.count, int):
            name = kind.accelerator or kind.name
            by_type[name] = by_type.get(name, 0) + kind.accelerators * group.count
    return ", ".join(f"{n} {name}" for name, n in by_type.items()) or "none"


def support(settings: config.Settings) -> str:
    """EKS's support of the version and the day it ends (infra/versions.py, dated)."""
    version = settings.eks.version
    status = versions.support_status(version)
    ends = (versions.END_OF_STANDARD_SUPPORT if status == "standard" else versions.END_OF_EXTENDED_SUPPORT).get(version)
    return f"{status} to {ends}" if ends and status != "outside" else status


def _behind(version: str, newest: tuple[int, int] | None) -> str:
    if newest is None or versions.parse(version) >= newest:
        return version
    gap = newest[1] - versions.parse(version)[1] if newest[0] == versions.parse(version)[0] else None
    return f"{version}, {gap} behind" if gap else f"{version}, behind {versions.fmt(newest)}"


def _kinds(callouts: list[str]) -> list[str]:
    import re

    return list(dict.fromkeys(m.group(1).strip() for c in callouts if (m := re.match(r"([A-Z][A-Z ]+):", c))))


def _cut(names: list[str], width: int) -> str:
    """As many names as fit in `width`, and how many more."""
    shown: list[str] = []
    for i, name in enumerate(names):
        more = f" +{len(names) - i - 1}" if i < len(names) - 1 else ""
        if len(", ".join([*shown, name]) + more) > width:
            return ", ".join(shown) + f" +{len(names) - len(shown)}" if shown else f"{len(names)} callouts"
        shown.append(name)
    return ", ".join(shown) or "-"


def _change_cells(report: dict | str | None) -> tuple[str, str, str, str, list[str], list[str]]:
    """(verdict, change, minutes, replaces, callouts, what stands in for them) of a review."""
    if not isinstance(report, dict):
        return "unreviewed", "-", "-", "-", [], [report] if isinstance(report, str) else []
    verdict = "PASS" if report.get("pass") else "FAIL"
    changes = report.get("changes")
    if report.get("left_behind"):
        return "left behind", "-", "-", "-", changes["callouts"], []
    if changes is None or not changes.get("deltas"):
        plan = (report.get("deploy_plan") or {}).get("minutes")
        callouts = (changes or {}).get("callouts", [])
        return verdict, "first deploy" if report.get("first_deploy") or changes is None else "-", \
            str(plan) if plan is not None else "-", "-", callouts, []
    hourly = (changes["deltas"].get("cost") or {}).get("hourly")
    change = "unknown" if hourly is None else "none" if hourly == 0 else f"{'+' if hourly > 0 else '-'}${abs(hourly):,.2f}"
    minutes = (changes.get("update_plan") or {}).get("minutes")
    replaced = [c for c in changes.get("changes", []) if c.get("action") == "replaced"]
    replaces = str(len(replaced)) if replaced else "none"
    return verdict, change, str(minutes) if minutes is not None else "-", replaces, changes["callouts"], []


def row(settings: config.Settings, report: dict | str | None, newest: tuple[int, int] | None = None) -> Row:
    """One environment's row; `report` its review (a line saying why there is none, or None);
    `newest` the fleet's newest Kubernetes version (who is behind it)."""
    verdict, change, minutes, replaces, callouts, why = _change_cells(report)
    kinds = _kinds(callouts)
    cost = f"{_monthly(report)} a month" if isinstance(report, dict) else why[0] if why else "not reviewed"
    details = [f"{settings.account}/{settings.region}; tier {tier(settings)}; chart {settings.hyperpod.helm_chart.revision[:12]}; "
               f"{cost}; add-on pins: {_addon_pins(settings)}"]
    if isinstance(report, dict) and (changes := report.get("changes")) and changes.get("changes"):
        replaced = [f"{c['type']} `{c['resource']}` in {c['stack']}" for c in changes["changes"] if c.get("action") == "replaced"]
        if replaced:
            details.append("replaces " + ", ".join(replaced))
    details += [f"stop at {c}" for c in callouts]
    return Row(settings.env_name, verdict, change, minutes, ", ".join(kinds) or "-", replaces, gpus(settings),
               _behind(settings.eks.version, newest), support(settings), tuple(details))


def failed_row(env: str, why: str, report: dict | str | None = None) -> Row:
    """An environment the command could not take as far as a row of figures, named with why; one
    the change removes (its review says what stays behind) with its callout."""
    if isinstance(report, dict) and report.get("left_behind"):
        callouts = report["changes"]["callouts"]
        return Row(env, "left behind", "-", "-", ", ".join(_kinds(callouts)), "-", "-", "-", "-",
                   tuple(f"stop at {c}" for c in callouts))
    return Row(env, "refused" if "refused" in why else "failed", "-", "-", "-", "-", "-", "-", "-", (why,))


HEADER = Row("environment", "verdict", "cost/h", "min", "stop at", "replaces", "GPUs", "Kubernetes", "support")


def wave_order(context: dict, envs: list[str]) -> list[str]:
    """`envs` in the pipeline's wave order where cdk.json holds a delivery block, the others after
    in their own order."""
    from cli.review import approvals, config_diff

    holders = approvals.holders(context)
    waves = (config_diff.merged(context, holders[0]).get("delivery") or {}).get("waves") if holders else None
    order = [e for wave in waves for e in wave if isinstance(e, str)] if isinstance(waves, list) and \
        all(isinstance(w, list) for w in waves) else []
    return sorted(envs, key=lambda e: (order.index(e), 0) if e in order else (len(order), envs.index(e)))


def rows(settings: list[config.Settings], reports: dict, context: dict, envs: list[str], failed: dict[str, str]) -> list[Row]:
    """A row each of `envs` in the pipeline's wave order: those that loaded (`settings`) by their
    review (`reports`, env -> report or why none), a failed one (`failed`, env -> why) as such."""
    by_env, top = {s.env_name: s for s in settings}, newest(settings)
    return [failed_row(e, failed.get(e, "failed"), reports.get(e)) if e in failed or e not in by_env
            else row(by_env[e], reports.get(e), top) for e in wave_order(context, envs)]


def newest(settings: list[config.Settings]) -> tuple[int, int] | None:
    return max((versions.parse(s.eks.version) for s in settings), default=None)


def table(rows: list[Row]) -> str:
    """The rows under a header, in aligned columns within WIDTH, then each environment's details."""
    import textwrap

    columns = [f for f in vars(HEADER) if f != "details"]
    cells = [[getattr(r, f) for f in columns] for r in [HEADER, *rows]]
    at = columns.index("stops")
    others = sum(max(len(c[i]) for c in cells) + 2 for i in range(len(columns)) if i != at)
    for line in cells[1:]:
        line[at] = _cut(line[at].split(", ") if line[at] != "-" else [], max(WIDTH - others, STOPS_MIN))
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        for detail in r.details:
            lines += textwrap.wrap(f"{r.env}: {detail}", WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    lines += textwrap.wrap(
        f"cost/h and min: the change against its baseline, by the last review of this config (cli/review/cost.py, "
        f"deploy_plan.py); support: EKS's ({versions.EKS_SUPPORT_SOURCE}); tier: eks.upgrade_policy, and whether "
        "eks.deletion_protection refuses a delete", WIDTH, subsequent_indent="    ")
    return "\n".join(lines)


def stack_names(context: dict, env: str) -> list[str]:
    """The names of every stack an environment can have (its config must load)."""
    from infra import naming, validation

    settings, _ = validation.load_settings(context, env)
    return [settings.stack_name(suffix) for suffix in naming.STACK_SUFFIXES]


def names_by_env(context: dict) -> dict[str, list[str]]:
    """Each environment's stack names, where its config loads: what tells one environment's baseline from another's."""
    names = {}
    for env in config.environment_names(context):
        try:
            names[env] = stack_names(context, env)
        except config.ConfigError:
            continue
    return names
