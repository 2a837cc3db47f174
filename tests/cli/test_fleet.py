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

COST, ADDONS = 6, 7  # the columns after environment, account/region, Kubernetes, support, tier, chart


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
    head = next(i for i, line in enumerate(lines) if line.startswith("environment  account/region"))
    rows = {}
    for line in lines[head + 2:]:
        if line.startswith("support: "):
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return rows


def _expected(context: dict, env: str) -> tuple[list[str], list]:
    """The first six cells as the settings say them, and the add-ons config pins."""
    s = validation.load_settings(context, env)[0]
    cells = [env, f"{s.account}/{s.region}", s.eks.version, versions.support_status(s.eks.version),
             f"{s.eks.upgrade_policy}, {'protected' if s.protection.termination_protection else 'deletable'}",
             s.hyperpod.helm_chart.revision[:12]]
    return cells, [a for a in addons_of(s) if a.pinned]


def test_support_status_follows_the_dated_calendar():
    assert [versions.support_status(v) for v in ("1.36", "1.35", "1.34", "1.32", "1.31", "1.28")] == [
        "standard", "standard", "extended", "extended", "outside", "outside"]


def test_validate_all_on_the_committed_cdk_json_ends_with_a_row_per_environment(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["validate", "--all"]) == 0
    out = capsys.readouterr().out
    assert [line.split(" (")[0] for line in out.splitlines()[:2]] == ["ok: dev", "ok: prod"]
    rows = _table(out)
    assert list(rows) == ["dev", "prod"]
    for env, cells in rows.items():
        head, pins = _expected(CONTEXT, env)
        assert cells[:6] == head
        for addon in pins:  # prod pins kube-proxy, coredns, cert-manager and the training operator
            assert f"{addon.name.removeprefix('amazon-sagemaker-hyperpod-')} {addon.pinned}" in cells[ADDONS]
    # Deletion protection follows termination protection where unset: dev deletable, prod protected.
    assert (rows["dev"][4], rows["prod"][4]) == ("EXTENDED, deletable", "EXTENDED, protected")
    assert rows["dev"][ADDONS].endswith("at EKS's default") and "cert-manager v1.18.2-eksbuild.2" in rows["prod"][ADDONS]


def test_three_environments_in_two_regions_and_two_accounts_each_get_their_line_and_row(tmp_path, capsys, monkeypatch):
    context = _three()
    monkeypatch.chdir(_project(tmp_path, context))
    assert cli.main(["validate", "-c", "env=dev", "-c", "env=staging", "-c", "env=prod"]) == 0
    out = capsys.readouterr().out
    assert [line.split(" (")[0] for line in out.splitlines()[:3]] == ["ok: dev", "ok: staging", "ok: prod"]
    rows = _table(out)
    assert rows["staging"][:4] == ["staging", "111111111111/eu-central-1", "1.35", "standard"]
    assert rows["prod"][:4] == ["prod", "222222222222/us-east-1", "1.34", "extended"]
    assert rows["dev"][:4] == ["dev", "111111111111/us-east-1", "1.34", "extended"]
    assert {cells[COST] for cells in rows.values()} == {"not reviewed"}  # no review of these configs in cdk.out

    # upgrade-plan: each environment's plan, staging already there, then the table.
    assert cli.main(["upgrade-plan", "--to", "1.35", "--all"]) == 0
    out = capsys.readouterr().out
    assert "upgrade plan for dev: Kubernetes 1.34 -> 1.35" in out and "upgrade plan for prod: Kubernetes 1.34 -> 1.35" in out
    assert "staging: the cluster already runs Kubernetes 1.35; nothing to do" in out
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
    assert list(_table(captured.out)) == ["dev", "prod", "staging"]
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
    rows = _table(captured.out)
    for env in ("dev", "prod"):
        monthly = json.loads((out_root / f"review-{env}.json").read_text())["cost"]["monthly"]
        assert rows[env][COST].startswith(f"${monthly:,.0f}")
    assert "broken" not in rows
    # --assembly holds one environment's stacks.
    assert cli.main(["review", "--all", "--assembly", str(synth("dev").outdir)]) == 2
    assert "holds one environment's stacks" in capsys.readouterr().err
