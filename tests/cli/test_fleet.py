"""A fleet: validate, review and upgrade-plan over several environments, through the real CLI entry
(cli.main.main) on a cdk.json, each environment said in a line and then a row of the table.

The support column is held to the EKS release calendar (EKS user guide, "Understand the Kubernetes
version lifecycle on EKS": 14 months standard, 12 extended; the dates as endoflife.date/amazon-eks
lists them): on 2026-12-02, 1.35 is in standard support, 1.34 in extended, 1.31 past it (2026-11-26)."""

from __future__ import annotations

import json
import re
import shutil

from cli import main as cli
from cli.upgrade_plan import addons_of
from infra import config, validation, versions
from tests.conftest import CONTEXT, ROOT, review_outdir

VERDICT, CHANGE, MINUTES, STOPS, REPLACES, GPUS, KUBERNETES, SUPPORT = range(1, 9)  # after the environment


def _documented_staging() -> dict:
    """The staging environment docs/configuration.md shows how to add (another region, dev's shape)."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    return json.loads(re.search(r"^```json\n(\{\n  \"staging\".*?)^```", page, re.M | re.S).group(1))["staging"]


def _three() -> dict:
    """dev as committed; the documented staging, in another region, on Kubernetes 1.35; prod in another account."""
    ctx = json.loads(json.dumps(CONTEXT))
    envs = ctx["environments"]
    envs["staging"] = config.deep_merge(_documented_staging(), {"eks": {"version": "1.35"}})
    envs["prod"]["account"] = "222222222222"
    return ctx


def _project(tmp_path, context: dict):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    cdk_json["context"] = context
    (tmp_path / "cdk.json").write_text(json.dumps(cdk_json))
    return tmp_path


def _table(out: str) -> dict[str, list[str]]:
    """environment -> its cells, from the table the command ends with."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("environment  verdict"))
    rows = {}
    for line in lines[head + 2:]:
        if re.match(r"[\w-]+: ", line) or not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return rows


def _details(out: str) -> dict[str, str]:
    """environment -> what the table says of it below the rows, its wrapped lines joined."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("environment  verdict"))
    found: dict[str, str] = {}
    env = None
    for line in lines[head + 2:]:
        if line.startswith("    ") and env:
            found[env] += " " + line.strip()
        elif m := re.match(r"([\w-]+): (.*)", line):
            env = m.group(1)
            found[env] = (found[env] + " | " if env in found else "") + m.group(2)
    return found


def _table_fits(out: str) -> None:
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("environment  verdict"))
    assert max(len(line) for line in lines[head:]) <= 120


def _expected(context: dict, env: str) -> tuple[list[str], list]:
    """Where, tier and chart as the settings say them, and the add-ons config pins."""
    s = validation.load_settings(context, env)[0]
    where = [f"{s.account}/{s.region}", f"tier {s.eks.upgrade_policy}, {'protected' if s.protection.termination_protection else 'deletable'}",
             f"chart {s.hyperpod.helm_chart.revision[:12]}"]
    return where, [a for a in addons_of(s) if a.pinned]


def test_support_status_follows_the_dated_calendar():
    assert [versions.support_status(v) for v in ("1.36", "1.35", "1.34", "1.32", "1.31", "1.28")] == [
        "standard", "standard", "extended", "extended", "outside", "outside"]


def test_validate_all_on_the_committed_cdk_json_ends_with_a_row_per_environment(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["validate", "--all"]) == 0
    out = capsys.readouterr().out
    assert [line.split(" (")[0] for line in out.splitlines()[:2]] == ["ok: dev", "ok: prod"]
    rows, details = _table(out), _details(out)
    _table_fits(out)
    assert list(rows) == ["dev", "prod"]
    for env, cells in rows.items():
        where, pins = _expected(CONTEXT, env)
        assert details[env].startswith("; ".join(where))
        for addon in pins:  # prod pins kube-proxy, coredns, cert-manager and the training operator
            assert f"{addon.name.removeprefix('amazon-sagemaker-hyperpod-')} {addon.pinned}" in details[env]
        # 1.34 is in extended support until the calendar's day (infra/versions.py)
        assert cells[KUBERNETES:] == ["1.34", f"extended to {versions.END_OF_EXTENDED_SUPPORT['1.34']}"]
    # GPUs by type: prod's 4 ml.p5.48xlarge of 8 H100 each; dev's one ml.g5.8xlarge of one A10G (infra/catalogue.py)
    assert (rows["dev"][GPUS], rows["prod"][GPUS]) == ("1 A10G", "32 H100")
    # Deletion protection follows termination protection where unset: dev deletable, prod protected.
    assert "tier EXTENDED, deletable" in details["dev"] and "tier EXTENDED, protected" in details["prod"]
    assert "8 at EKS's default" in details["dev"] and "cert-manager v1.18.2-eksbuild.2" in details["prod"]


def test_three_environments_in_two_regions_and_two_accounts_each_get_their_line_and_row(tmp_path, capsys, monkeypatch):
    context = _three()
    monkeypatch.chdir(_project(tmp_path, context))
    assert cli.main(["validate", "-c", "env=dev", "-c", "env=staging", "-c", "env=prod"]) == 0
    out = capsys.readouterr().out
    assert [line.split(" (")[0] for line in out.splitlines()[:3]] == ["ok: dev", "ok: staging", "ok: prod"]
    rows, details = _table(out), _details(out)
    _table_fits(out)
    # Who is behind: staging runs 1.35, a minor ahead of the others; 1.35's standard support ends on the calendar's day.
    assert rows["staging"][KUBERNETES:] == ["1.35", f"standard to {versions.END_OF_STANDARD_SUPPORT['1.35']}"]
    assert rows["prod"][KUBERNETES] == rows["dev"][KUBERNETES] == "1.34, 1 behind"
    assert details["staging"].startswith("111111111111/eu-central-1") and details["prod"].startswith("222222222222/us-east-1")
    assert {cells[VERDICT] for cells in rows.values()} == {"unreviewed"}  # no review of these configs in cdk.out
    assert "no review of dev in cdk.out/" in details["dev"]

    # upgrade-plan: each environment's plan, staging already there, then the table.
    assert cli.main(["upgrade-plan", "--to", "1.35", "--all"]) == 0
    out = capsys.readouterr().out
    assert "upgrade plan for dev: Kubernetes 1.34 -> 1.35" in out and "upgrade plan for prod: Kubernetes 1.34 -> 1.35" in out
    # Offline, it is the config that asks for 1.35, not the cluster that is known to run it.
    assert "staging: the config asks for Kubernetes 1.35 already; nothing to do" in out
    # The metadata guard's roll-out is said once for the fleet, each environment's commands under it.
    assert out.count("existing nodes: the lifecycle scripts' metadata guard") == 1
    assert list(_table(out)) == ["dev", "prod", "staging"]
    # --from-account reads one account with one profile.
    assert cli.main(["upgrade-plan", "--to", "1.35", "--all", "--from-account"]) == 2
    assert "give one environment with it" in capsys.readouterr().err


def test_one_failing_environment_fails_the_run_and_the_others_are_still_said(tmp_path, capsys, monkeypatch):
    context = _three()
    context["environments"]["broken"] = {"network": {"nat_gateways": 4}}
    monkeypatch.chdir(_project(tmp_path, context))
    assert cli.main(["validate", "--all"]) == 2
    captured = capsys.readouterr()
    assert [line.split(" (")[0] for line in captured.out.splitlines()[:4]] == ["failed: broken", "ok: dev", "ok: prod", "ok: staging"]
    assert "error: broken: network.nat_gateways" in captured.err
    # The failed environment keeps its row, said refused, with why below the table.
    rows = _table(captured.out)
    assert list(rows) == ["broken", "dev", "prod", "staging"]
    assert rows["broken"][:2] == ["broken", "refused"] and set(rows["broken"][2:]) == {"-"}
    assert _details(captured.out)["broken"] == "config refused (the error lines above)"
    assert cli.main(["upgrade-plan", "--to", "1.35", "-c", "env=broken", "-c", "env=dev"]) == 2
    assert capsys.readouterr().out.splitlines()[0] == "failed: broken"
    # -c env= with --all is still a guess refused.
    assert cli.main(["validate", "--all", "-c", "env=dev"]) == 2
    assert "--all and dev name different environments" in capsys.readouterr().err


def test_two_environments_naming_one_cluster_in_one_account_and_region_are_each_refused(tmp_path, capsys, monkeypatch):
    # EKS CreateCluster (botocore's eks model): the name "must be unique within the Amazon Web Services Region and
    # Amazon Web Services account"; in another account the same name is no clash.
    import botocore.session

    doc = botocore.session.get_session().get_service_model("eks").operation_model("CreateCluster").input_shape.members["name"].documentation
    assert "must be unique within the Amazon Web Services Region and Amazon Web Services account" in doc
    context = _three()
    context["environments"]["staging"]["eks"]["cluster_name"] = "hyperpod-dev"  # another region: no clash
    context["environments"]["prod"]["account"] = "111111111111"
    context["environments"]["prod"].setdefault("hyperpod", {})["cluster_name"] = "hyperpod-dev-hp"
    monkeypatch.chdir(_project(tmp_path, context))
    assert cli.main(["validate", "--all"]) == 2
    err = capsys.readouterr().err
    assert "error: dev: hyperpod.cluster_name: 'hyperpod-dev-hp' is also environment prod's HyperPod cluster name" in err
    assert "error: prod: hyperpod.cluster_name: 'hyperpod-dev-hp' is also environment dev's HyperPod cluster name" in err
    assert "staging: eks.cluster_name" not in err
    assert cli.main(["validate", "-c", "env=dev"]) == 2  # one environment's validate says it too
    assert "error: dev: hyperpod.cluster_name" in capsys.readouterr().err


def test_a_review_of_several_environments_writes_each_and_fails_if_any_does(synth, tmp_path, capsys, monkeypatch, lint_cache):
    from cli import synth as synth_module

    project = _project(tmp_path / "unpacked", {**CONTEXT, "environments": {**CONTEXT["environments"], "broken": {"network": {"nat_gateways": 4}}}})
    monkeypatch.chdir(project)  # no git here: no main to compare with, a first deploy each

    made = {env: synth(env) for env in ("dev", "prod")}  # the session's syntheses of the same config, by cli.synth

    def synthesize(context, env, outdir):
        assert context["environments"][env] == CONTEXT["environments"][env]
        shutil.copytree(made[env].outdir, outdir, dirs_exist_ok=True)
        return made[env].settings, None

    monkeypatch.setattr(synth_module, "synthesize", synthesize)
    (tmp_path / "out").mkdir()
    out_root = review_outdir(tmp_path / "out", lint_cache)
    code = cli.main(["review", "-c", "env=dev", "-c", "env=broken", "-c", "env=prod", "--outdir", str(out_root)])
    captured = capsys.readouterr()
    assert code == 2, captured.err[-2000:]  # the broken config; dev and prod reviewed all the same
    for env in ("dev", "prod"):
        for suffix in ("md", "json", "sarif"):
            assert (out_root / f"review-{env}.{suffix}").exists()
        assert json.loads((out_root / f"review-{env}.json").read_text())["env"] == env
    verdicts = [line for line in captured.out.splitlines() if line.startswith("review of ")]
    assert verdicts == [f"review of dev: PASS ({out_root / 'review-dev.md'})", "review of broken: config refused",
                        f"review of prod: PASS ({out_root / 'review-prod.md'})"]
    rows, details = _table(captured.out), _details(captured.out)
    _table_fits(captured.out)
    for env in ("dev", "prod"):
        report = json.loads((out_root / f"review-{env}.json").read_text())
        assert f"${report['cost']['monthly']:,.0f} a month" in details[env]
        # a first deploy: no baseline, the whole deploy's minutes
        assert rows[env][VERDICT:MINUTES + 1] == ["PASS", "first deploy", str(report["deploy_plan"]["minutes"])]
    assert rows["broken"][VERDICT] == "refused" and details["broken"] == "config refused (the error lines above)"
    # --assembly holds one environment's stacks.
    assert cli.main(["review", "--all", "--assembly", str(synth("dev").outdir)]) == 2
    assert "holds one environment's stacks" in capsys.readouterr().err


def _report(callouts: list[str], hourly: float | None, minutes: int, replaced: int) -> dict:
    """A review of a change, as review-<env>.json holds it, with what the table reads."""
    changes = [{"action": "replaced", "type": "AWS::EKS::Cluster", "resource": "Cluster", "stack": "hyperpod-prod-cluster"}] * replaced
    return {"pass": True, "cost": {"monthly": 1000.0}, "first_deploy": None,
            "changes": {"callouts": callouts, "changes": changes + [{"action": "modified"}], "update_plan": {"minutes": minutes},
                        "deltas": {"cost": {"hourly": hourly}}}}


def test_a_change_row_says_its_verdict_cost_minutes_stops_and_pending_replacement():
    from cli import fleet

    prod = validation.load_settings(CONTEXT, "prod")[0]
    callouts = ["NODES ROLL: instance group gpu in hyperpod-prod-hyperpod rolls", "TEAM REMOVED: team ml-production leaves",
                "PROTECTION OFF: prod no longer keeps its data", "POD SECURITY LOWERED: team ml-research",
                "NODES ROLL: instance group system rolls"]
    row = fleet.row(prod, _report(callouts, 98.3, 42, 1))
    assert (row.verdict, row.change, row.minutes, row.replaces) == ("PASS", "+$98.30", "42", "1")
    assert row.stops == "NODES ROLL, TEAM REMOVED, PROTECTION OFF, POD SECURITY LOWERED"  # each kind once
    assert [d for d in row.details if d.startswith("stop at ")] == [f"stop at {c}" for c in callouts]
    assert "replaces AWS::EKS::Cluster `Cluster` in hyperpod-prod-cluster" in row.details
    quiet = fleet.row(prod, _report([], 0.0, 3, 0))
    assert (quiet.change, quiet.stops, quiet.replaces) == ("none", "-", "none")
    assert fleet.row(prod, _report([], -12.5, 3, 0)).change == "-$12.50"
    # In the table, as many kinds as the width leaves room for, then how many more; every callout in full below it.
    text = fleet.table([row, quiet])
    assert max(len(line) for line in text.splitlines()) <= fleet.WIDTH
    cell = re.split(r"\s{2,}", text.splitlines()[2])[STOPS]
    assert re.fullmatch(r"NODES ROLL(, [A-Z ]+)* \+\d", cell) and cell != row.stops
    assert _details(text)["prod"].count("stop at ") == len(callouts)


def test_the_rows_follow_the_pipelines_waves_where_cdk_json_holds_one():
    from cli import fleet
    from tests.conftest import CAPABILITIES, FLEETS, patched_context

    context = patched_context("dev", CAPABILITIES["delivery"], FLEETS["delivery"])  # waves [dev, staging], [prod]
    assert fleet.wave_order(context, ["prod", "other", "staging", "dev"]) == ["dev", "staging", "prod", "other"]
    assert fleet.wave_order(CONTEXT, ["prod", "dev"]) == ["prod", "dev"]  # no pipeline: the order given


def test_a_real_review_that_turns_off_prods_protection_is_its_row_in_the_fleet_table(synth, tmp_path, lint_cache, capsys,
                                                                                   monkeypatch):
    # prod as cdk.json deploys it (the session's synthesis), then a change that turns its termination protection off:
    # synthesized, reviewed against that assembly by the real CLI, and read back by `validate --all`'s table. (Only
    # the cluster stack's template changes, so the review lints one stack anew.)
    from tests.conftest import patched_context

    patch = {"protection": {"termination_protection": False}}
    context = patched_context("prod", patch)
    project = _project(tmp_path / "project", context)
    monkeypatch.chdir(project)
    review_outdir(project / "cdk.out", lint_cache)
    status = cli.main(["review", "--env", "prod", "--assembly", str(synth("prod", patch).outdir), "--against",
                       str(synth("prod").outdir), "--quiet"])
    report = json.loads((project / "cdk.out" / "review-prod.json").read_text())
    callouts = report["changes"]["callouts"]
    # Termination protection off takes the EKS cluster's deletion protection with it (eks.deletion_protection follows it).
    kinds = ["DELETION PROTECTION", "PROTECTION OFF"]
    assert [c.split(":")[0] for c in callouts] == ["DELETION PROTECTION", "PROTECTION OFF"]
    assert status == (0 if report["pass"] else 1)
    capsys.readouterr()
    assert cli.main(["validate", "--all"]) == 0
    out = capsys.readouterr().out
    _table_fits(out)
    prod, dev = _table(out)["prod"], _table(out)["dev"]
    assert prod[VERDICT] == ("PASS" if report["pass"] else "FAIL") and prod[REPLACES] == "none"
    # Each kind once, as many as the cell holds, then how many more; every callout in full below the table.
    named, _, more = prod[STOPS].partition(" +")
    assert named.split(", ") == kinds[:len(named.split(", "))] and len(named.split(", ")) + int(more or 0) == len(kinds)
    assert (dev[VERDICT], dev[STOPS]) == ("unreviewed", "-")
    for callout in callouts:
        assert f"stop at {callout}" in _details(out)["prod"]
    assert "(protection.termination_protection true -> false)" in _details(out)["prod"]
