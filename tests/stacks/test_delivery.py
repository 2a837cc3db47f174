"""The delivery stack (tests/conftest.py's `delivery` config: dev and staging, in another region,
side by side in one wave; then prod, in another account, after a person's approval) and the one
composition it shares with hand deploys."""

from __future__ import annotations

import json
from pathlib import Path

from cli.review import replacement
from cli.review.exposure import STATEFUL_TYPES
from stacks import delivery
from tests.conftest import CAPABILITIES, FLEETS

# What holds state, as the review counts it (cli/review/exposure.py), and the network a cluster sits in:
# a new logical ID for any of these replaces it (CloudFormation User Guide, "Update behaviors of
# stack resources": a resource whose logical ID changes is deleted and created anew).
HOLDS_STATE = (*STATEFUL_TYPES, "AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::VPCCidrBlock")
# Recorded from main's synth of dev and prod at 89c91d8, before the composition moved: every stack
# name and the logical ID of everything that holds state, as clusters deployed by hand have them.
MAIN = Path(__file__).resolve().parent.parent / "fixtures" / "stateful_ids_main.json"


def holds_state(template: dict) -> set[str]:
    return {f"{r['Type']} {lid}" for lid, r in template["Resources"].items() if r["Type"] in HOLDS_STATE}


def stage_templates(s, stage: str) -> dict[str, dict]:
    """Stack name -> template of what the pipeline's Stage `stage` synthesized (its nested assembly)."""
    folder = s.outdir / f"assembly-{stage}"
    manifest = json.loads((folder / "manifest.json").read_text())
    return {a["properties"]["stackName"]: json.loads((folder / a["properties"]["templateFile"]).read_text())
            for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}


def app_templates(s) -> dict[str, dict]:
    return {s.settings.stack_name(suffix): t for suffix, t in s.templates.items()}


def test_the_app_path_keeps_every_stack_name_and_stateful_logical_id_main_deployed(synth):
    # A cluster deployed by hand from main is the same cluster after this change: nothing it holds
    # is renamed (new resources may come; none that main deployed goes or moves).
    recorded = json.loads(MAIN.read_text())
    for env in ("dev", "prod"):
        now = app_templates(synth(env))
        assert set(recorded[env]) <= set(now), (env, sorted(set(recorded[env]) - set(now)))
        for name, ids in recorded[env].items():
            assert set(ids) <= holds_state(now[name]), (env, name, sorted(set(ids) - holds_state(now[name])))


def test_the_pipelines_stage_builds_the_same_stacks_as_a_hand_deploy(synth):
    # The Stage moves templates and artifact ids (assembly-<stage>/), never stack names or logical IDs.
    s = synth("delivery")
    for env in ("dev", "prod"):
        by_hand, staged = app_templates(synth(env)), stage_templates(s, env)
        assert sorted(staged) == sorted(by_hand), env
        for name, template in by_hand.items():
            assert holds_state(staged[name]) == holds_state(template), (env, name)
            # Every other logical ID too (a security group's rule from itself, renamed, would be
            # created anew beside the rule it replaces, which EC2 refuses as a duplicate).
            assert set(staged[name]["Resources"]) == set(template["Resources"]), (env, name)
            # And no create-only property differs (cfn-lint's schemas, as the review judges a
            # replacement): what the Stage changes (construct paths in Name tags, descriptions and
            # the EKS manifests' prune labels) is updated in place. dev's stage is in dev's account;
            # prod's here is in another, whose CDK asset bucket its Lambda layers name.
            for lid, resource in template["Resources"].items():
                if env == "dev":
                    assert replacement.replaced_by(resource, staged[name]["Resources"][lid]) == [], (env, name, lid)


def test_hand_deploys_see_the_environments_stacks_at_the_top_level(synth):
    # `cdk deploy --all -c env=dev` and a bare `cdk diff` see only top-level stacks: dev's own stay
    # there beside the delivery stack; the stages' stacks are in nested assemblies only.
    s = synth("delivery")
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    top = {a["properties"].get("stackName", k) for k, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
    assert {s.settings.stack_name(k) for k in synth("dev").templates} | {s.settings.stack_name("delivery")} <= top
    assert not any(n.startswith(("hyperpod-staging-", "hyperpod-prod-")) for n in top)
    assert {a for a, v in manifest["artifacts"].items() if v["type"] == "cdk:cloud-assembly"} == {"assembly-dev", "assembly-staging", "assembly-prod"}


def _pipeline(s) -> dict:
    (pipeline,) = s.resources("delivery", "AWS::CodePipeline::Pipeline").values()
    return pipeline["Properties"]


def _buildspec(s, action: dict) -> dict:
    project = s.templates["delivery"]["Resources"][action["Configuration"]["ProjectName"]["Ref"]]
    spec = project["Properties"]["Source"]["BuildSpec"]
    # A reference in it (the reviews bucket's name) is read as TOKEN.
    return json.loads(spec if isinstance(spec, str) else "".join(p if isinstance(p, str) else "TOKEN" for p in spec["Fn::Join"][1]))


def _commands(s, action: dict) -> list[str]:
    phases = _buildspec(s, action)["phases"]
    return [*phases.get("install", {}).get("commands", []), *phases["build"]["commands"]]


WAVES = CAPABILITIES["delivery"]["delivery"]["waves"]
# The steps before a stage's first change set (after it: Protect-<env>, termination protection).
CHECKS = ("Validate-", "Review-", "Preflight-", "Approve-")
ENVIRONMENTS = [e for wave in WAVES for e in wave]


def _by_environment(s) -> tuple[dict[str, str], dict[str, list[dict]]]:
    """(the CodePipeline stage each environment deploys in, its actions there): a wave of one
    environment is a stage of that name; a wave of several is one stage (wave-N) whose actions
    carry their environment's name and a dot before their own."""
    where, actions = {}, {}
    for stage in _pipeline(s)["Stages"]:
        for action in stage["Actions"]:
            env, dot, name = action["Name"].partition(".")
            if stage["Name"] in ENVIRONMENTS:
                env, name = stage["Name"], action["Name"]
            elif not (dot and env in ENVIRONMENTS):
                continue
            where[env] = stage["Name"]
            actions.setdefault(env, []).append({**action, "Name": name})
    return where, actions


def test_the_pipeline_deploys_the_waves_in_order_each_stage_after_its_checks(synth):
    s = synth("delivery")
    names = [stage["Name"] for stage in _pipeline(s)["Stages"]]
    assert names[:2] == ["Source", "Build"]
    where, stages = _by_environment(s)
    # One CodePipeline stage per wave, in the waves' order; the environments of a wave side by side in it.
    assert [where[wave[0]] for wave in WAVES] == [n for n in names if n in set(where.values())]
    assert [len({where[e] for e in wave}) for wave in WAVES] == [1] * len(WAVES)
    assert {where[e] for e in WAVES[0]} == {"wave-1"} and len(WAVES[0]) == 2
    # Side by side: each environment of the wave starts its checks at once, none after the other's;
    # and in step: run orders hold across the stage, so neither changes anything before the other's
    # checks have passed (what validate warns of where one of them waits for a person).
    assert {min(a["RunOrder"] for a in stages[e]) for e in WAVES[0]} == {1}
    first_change = {e: min(a["RunOrder"] for a in stages[e] if a["ActionTypeId"]["Provider"] == "CloudFormation") for e in WAVES[0]}
    last_check = {e: max(a["RunOrder"] for a in stages[e] if a["Name"].startswith(CHECKS)) for e in WAVES[0]}
    assert all(first_change[e] > last_check[other] for e in WAVES[0] for other in WAVES[0])
    for env in ENVIRONMENTS:
        actions = sorted(stages[env], key=lambda a: a["RunOrder"])
        kinds = [(a["Name"], a["ActionTypeId"]["Provider"], a["RunOrder"]) for a in actions]
        checks = [k for k in kinds if k[0].startswith(CHECKS)]
        first_deploy = min(a["RunOrder"] for a in actions if a["ActionTypeId"]["Provider"] == "CloudFormation")
        # validate, then the review, then preflight, one after another, all before the first change set.
        assert [k[0] for k in checks[:3]] == [f"Validate-{env}", f"Review-{env}", f"Preflight-{env}"]
        assert [k[2] for k in checks[:3]] == sorted({k[2] for k in checks[:3]}) and len({k[2] for k in checks[:3]}) == 3
        assert all(k[2] < first_deploy for k in checks)
        by_name = {a["Name"]: a for a in actions}
        assert any(c.endswith(f"hyperpod-cdk validate -c env={env}") for c in _commands(s, by_name[f"Validate-{env}"]))
        review = _commands(s, by_name[f"Review-{env}"])
        # The review of the stage's own assembly; its exit status ends its step (after its files are kept):
        # nothing after it masks a refusal.
        assert any(c.startswith(f"status=0; .venv/bin/hyperpod-cdk review --env {env} --assembly cdk.out/assembly-{env} $against")
                   for c in review)
        assert review[-1] == 'exit "$status"'
        assert not any("cdk synth" in c for c in review)
        assert any(c.endswith(f"hyperpod-cdk preflight -c env={env} --pipeline") for c in _commands(s, by_name[f"Preflight-{env}"]))


def test_a_person_approves_prod_after_its_review_and_nobody_waits_for_dev_or_staging(synth):
    s = synth("delivery")
    _, stages = _by_environment(s)
    for env, protected in (("dev", False), ("staging", False), ("prod", True)):
        approvals = [a for a in stages[env] if a["ActionTypeId"]["Category"] == "Approval"]
        assert bool(approvals) == protected, env
        if approvals:
            order = {a["Name"]: a["RunOrder"] for a in stages[env]}
            deploys = [a["RunOrder"] for a in stages[env] if a["ActionTypeId"]["Provider"] == "CloudFormation"]
            assert order[f"Review-{env}"] < approvals[0]["RunOrder"] < min(deploys)


def test_the_review_and_preflight_read_the_target_account_through_its_read_only_lookup_role(synth):
    # The CDK bootstrap template's lookup role (cdk-<qualifier>-lookup-role-<account>-<region>),
    # which `cdk bootstrap --trust` lets the pipeline's account assume (docs/delivery.md).
    s = synth("delivery")
    _, stages = _by_environment(s)
    prod = FLEETS["delivery"]["prod"]["account"]
    role = f"arn:aws:iam::{prod}:role/cdk-hnb659fds-lookup-role-{prod}-us-east-1"
    for step in ("Review-prod", "Preflight-prod"):
        action = next(a for a in stages["prod"] if a["Name"] == step)
        assert any(f"--role-arn {role} " in c for c in _commands(s, action)), step
    assumed = [st for p in s.resources("delivery", "AWS::IAM::Policy").values() for st in p["Properties"]["PolicyDocument"]["Statement"]
               if st["Action"] == "sts:AssumeRole" and st.get("Resource") == role]
    assert len(assumed) == 2  # the review's project role and preflight's, and no other


def test_the_synth_step_does_the_readmes_set_up_prepares_each_chart_and_synthesizes_the_pipelines_environment(synth):
    s = synth("delivery")
    build = next(st for st in _pipeline(s)["Stages"] if st["Name"] == "Build")["Actions"][0]
    commands = _commands(s, build)
    assert "make install-synth" in commands and "make hyperpod-chart ENV=dev" in commands
    assert commands[-1] == "bin/cdk synth --quiet -c env=dev"
    assert _buildspec(s, build)["artifacts"]["base-directory"] == "cdk.out"


def test_the_pipeline_reads_through_the_connection_and_shares_artifacts_across_accounts_under_its_key(synth):
    s = synth("delivery")
    source = next(st for st in _pipeline(s)["Stages"] if st["Name"] == "Source")["Actions"][0]
    d = CAPABILITIES["delivery"]["delivery"]["source"]
    assert source["Configuration"]["ConnectionArn"] == d["connection_arn"]
    assert source["Configuration"]["FullRepositoryId"] == d["repository"] and source["Configuration"]["BranchName"] == d["branch"]
    store = _pipeline(s).get("ArtifactStores") or [{"ArtifactStore": _pipeline(s)["ArtifactStore"]}]
    assert all(st["ArtifactStore"]["EncryptionKey"]["Type"] == "KMS" for st in store)
    # The other account's CDK deploy role may decrypt what the pipeline hands it (its bootstrap roles' names).
    (key,) = s.resources("delivery", "AWS::KMS::Key").values()
    prod = FLEETS["delivery"]["prod"]["account"]
    granted = json.dumps([st["Principal"] for st in key["Properties"]["KeyPolicy"]["Statement"] if "kms:Decrypt" in st["Action"]])
    assert f":iam::{prod}:role/cdk-hnb659fds-deploy-role-{prod}-us-east-1" in granted
    # staging's region has its replication bucket in CodePipeline's support stack, deployed with this one.
    assert "delivery-support-eu-central-1" in s.templates


def test_the_pipeline_installs_the_cdk_cli_package_json_pins():
    from tests.conftest import ROOT

    assert delivery.cdk_cli_version() == json.loads((ROOT / "package-lock.json").read_text())["packages"]["node_modules/aws-cdk"]["version"]


def test_the_lookup_role_is_read_only_and_assumable_by_the_accounts_bootstrap_trusts():
    # The pinned CDK CLI's bootstrap template (node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml).
    import yaml

    from tests.conftest import ROOT

    template = yaml.safe_load((ROOT / "node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml").read_text())
    assert template["Parameters"]["Qualifier"]["Default"] == delivery.QUALIFIER
    role = template["Resources"]["LookupRole"]["Properties"]
    assert role["RoleName"] == {"Fn::Sub": "cdk-${Qualifier}-lookup-role-${AWS::AccountId}-${AWS::Region}"}
    assert role["ManagedPolicyArns"] == [{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/ReadOnlyAccess"}]
    denied = [st for p in role["Policies"] for st in p["PolicyDocument"]["Statement"] if st["Effect"] == "Deny"]
    assert any("kms:Decrypt" in st["Action"] for st in denied)
    # `cdk bootstrap --trust ACCOUNT` (TrustedAccounts) may assume it, not only --trust-for-lookup.
    trusted = json.dumps(role["AssumeRolePolicyDocument"]["Statement"])
    assert '{"Ref": "TrustedAccounts"}' in trusted and '"sts:AssumeRole"' in trusted


def _fleet(**block):
    """(settings, waves, the warnings on the waves) of the delivery config with `block`'s fields over its
    delivery block's (a field set to None is left out)."""
    from addons import registry
    from tests.conftest import patched_context

    fields = {k: v for k, v in {**CAPABILITIES["delivery"]["delivery"], **block}.items() if v is not None}
    context = patched_context("dev", {"delivery": fields}, FLEETS["delivery"])
    settings, warnings, waves = registry.load(context, "dev")
    return settings, waves, [w for w in warnings if w.startswith("dev: delivery.waves")]


def test_who_approves_is_the_environments_with_termination_protection_unless_the_block_names_them():
    settings, waves, _ = _fleet(protected=None)
    assert settings.delivery.approved(waves) == {"staging", "prod"}
    settings, waves, _ = _fleet(protected=["prod"])
    assert settings.delivery.approved(waves) == {"prod"}
    settings, waves, _ = _fleet(protected=[])
    assert settings.delivery.approved(waves) == set()


def test_an_environment_beside_one_a_person_approves_is_said_to_wait_for_that_approval():
    # CodePipeline runs a stage's actions by run order across the stage (its User Guide, action
    # structure requirements: runOrder), and a wave is one stage whose environments' steps share run
    # orders (the template, in the test above): an approval in the wave holds every environment in it.
    settings, waves, warnings = _fleet(protected=None)  # staging approved by default (termination protection), dev not
    assert warnings == ["dev: delivery.waves[0]: dev deploys nothing until a person approves staging: a wave is one "
                        "CodePipeline stage whose actions go by run order, each after every earlier step of the wave; "
                        "give the approved environments a wave of their own"]
    assert _fleet(waves=[["dev", "prod"]], protected=None)[2][0].startswith(
        "dev: delivery.waves[0]: dev deploys nothing until a person approves prod:")
    assert _fleet()[2] == []  # the capability's: prod alone waits, in a wave of its own
    assert _fleet(waves=[["dev"], ["staging"], ["prod"]], protected=None)[2] == []


def test_the_synth_prepares_each_chart_revision_once_and_synthesizes_the_environment_holding_the_block():
    settings, waves, _ = _fleet()
    install, build = delivery.synth_commands(settings, waves)
    assert install[-1] == "make install-synth"
    # All three share the committed revision: one fetch, named after the first environment that uses it.
    assert build == ["make hyperpod-chart ENV=dev", "bin/cdk synth --quiet -c env=dev"]


def test_protected_stacks_get_termination_protection_after_their_stage_under_the_deploy_role(synth):
    # CDK Pipelines' CloudFormation actions ignore a stack's termination protection (aws/aws-cdk#17871, #30405):
    # a step after the stage sets it on the stacks the Stage's assembly protects, read from that assembly.
    import yaml

    from tests.conftest import ROOT

    s = synth("delivery")
    _, stages = _by_environment(s)
    prod = FLEETS["delivery"]["prod"]["account"]
    protect = next(a for a in stages["prod"] if a["Name"] == "Protect-prod")
    assert protect["RunOrder"] > max(a["RunOrder"] for a in stages["prod"] if a["ActionTypeId"]["Provider"] == "CloudFormation")
    commands = "\n".join(_commands(s, protect))
    assert f"--role-arn arn:aws:iam::{prod}:role/cdk-hnb659fds-deploy-role-{prod}-us-east-1 " in commands
    assert 'terminationProtection' in commands and "cdk.out/assembly-prod/manifest.json" in commands
    assert "update-termination-protection --enable-termination-protection" in commands
    assert not any(a["Name"].startswith("Protect-") for a in stages["dev"])  # dev's stacks are not protected
    # The pinned CLI's bootstrap lets its deploy role do it (node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml).
    template = yaml.safe_load((ROOT / "node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml").read_text())
    allowed = [a for p in template["Resources"]["DeploymentActionRole"]["Properties"]["Policies"]
               for st in p["PolicyDocument"]["Statement"] for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])]
    assert "cloudformation:UpdateTerminationProtection" in allowed


def test_the_asset_jobs_have_room_for_the_training_image_and_a_pinned_publisher(synth):
    s = synth("delivery")
    assets = next(st for st in _pipeline(s)["Stages"] if st["Name"] == "Assets")["Actions"]
    image = next(a for a in assets if a["Name"] == "TrainingImage")
    project = s.templates["delivery"]["Resources"][image["Configuration"]["ProjectName"]["Ref"]]["Properties"]
    assert project["Environment"]["ComputeType"] == "BUILD_GENERAL1_LARGE" and project["TimeoutInMinutes"] == 240
    assert project["Environment"]["PrivilegedMode"] is True  # docker, as CDK Pipelines sets for an image asset
    installs = {c for a in assets for c in _buildspec(s, a)["phases"]["install"]["commands"]}
    assert installs == {f"npm install -g cdk-assets@{delivery.npm_pin('cdk-assets')}"}  # package-lock's, never @latest


def test_the_connection_is_granted_under_its_own_arns_service_prefix(synth):
    # "When specifying a resource in the IAM policy, the service prefix needs to match that of the resource"
    # (Developer Tools console guide, Connections rename): a codeconnections ARN needs codeconnections:UseConnection.
    from policy_sentry.querying.actions import get_action_data

    s = synth("delivery")
    arn = CAPABILITIES["delivery"]["delivery"]["source"]["connection_arn"]
    granted = {(a, r) for p in s.resources("delivery", "AWS::IAM::Policy").values()
               for st in p["Properties"]["PolicyDocument"]["Statement"]
               for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
               for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]) if isinstance(r, str)}
    assert ("codeconnections:UseConnection", arn) in granted
    assert get_action_data("codeconnections", "UseConnection")  # an action the Service Authorization Reference knows


def test_the_approval_links_to_this_environments_kept_reviews(synth):
    s = synth("delivery")
    _, stages = _by_environment(s)
    approve = next(a for a in stages["prod"] if a["Name"] == "Approve-prod")["Configuration"]
    link = approve["ExternalEntityLink"]["Fn::Join"][1]
    (bucket,) = [lid for lid, r in s.resources("delivery", "AWS::S3::Bucket").items() if lid.startswith("Reviews")]
    assert {"Ref": bucket} in link and link[-1].endswith("&prefix=reviews/prod/")
    assert "review-prod.md" in approve["CustomData"]


def test_a_pipeline_in_the_account_of_an_environment_nobody_approves_is_refused():
    import pytest

    from infra.config import ConfigError
    from tests.conftest import TOOLING_ACCOUNT

    with pytest.raises(ConfigError) as refused:
        _fleet(account=None)  # dev's account, which deploys unapproved, while prod (approved) trusts it
    (line,) = [p for p in refused.value.problems if "delivery.account" in p]
    assert line.startswith("dev: delivery.account (default: this environment's): 111111111111 is the account of dev and "
                           "staging, which deploy without a person's approval, and prod (222222222222) would trust it")
    assert _fleet(account=TOOLING_ACCOUNT)[0].delivery.account == TOOLING_ACCOUNT
    # One account for every environment: the pipeline adds no trust that the account's own IAM does not already give.
    assert _fleet(account=None, waves=[["dev"]], protected=[])[0].delivery.account is None


def test_a_pipeline_never_crosses_a_partition():
    import pytest

    from infra.config import ConfigError

    source = {**CAPABILITIES["delivery"]["delivery"]["source"],
              "connection_arn": "arn:aws-cn:codeconnections:cn-north-1:333333333333:connection/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"}
    with pytest.raises(ConfigError) as refused:
        _fleet(source=source)
    assert any(p.startswith("dev: delivery.source.connection_arn: arn:aws-cn:") and "partition aws-cn" in p for p in refused.value.problems)
    with pytest.raises(ConfigError) as refused:
        _fleet(region="cn-north-1", waves=[["dev"]], protected=[])
    assert any("dev deploys to us-east-1 (partition aws), the pipeline runs in cn-north-1 (aws-cn)" in p for p in refused.value.problems)


def test_a_branch_is_refused_exactly_where_git_refuses_it():
    # git itself is the source: `git check-ref-format --branch NAME` (git-check-ref-format(1)).
    import subprocess

    from infra.config.delivery import branch_problem

    names = ["main", "release/2026-12", "feature/x.lock", "x.lock/y", "-x", "HEAD", "a..b", "a b", "a~1", "a^", "a:b",
             "a?", "a*", "a[", "a\\b", "x/", "/x", "a//b", "a.", ".hidden", "ok/.x", "a@{b", "dev@x", "v1.0", "€uro", "tab\there", "@"]
    for name in names:
        git_ok = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True).returncode == 0
        assert (branch_problem(name) is None) == git_ok, name
