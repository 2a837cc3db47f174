"""upgrade-plan: one control-plane minor version per step, each with the add-on versions for it,
the task governance CRD migration where the add-on crosses it, the cdk.json change that
validates, and each group's AMI update with its own rolling batch; offline from the dated
table, and with credentials from EKS (a botocore Stubber, responses in botocore's shapes)."""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import Stubber

from cli import main as cli
from cli import upgrade_plan
from infra import config, validation, versions
from tests.conftest import CAPABILITIES, CONTEXT, patched_context

REGION = "us-east-1"


def _settings(env="dev", patch=None):
    return validation.load_settings(patched_context(env, patch) if patch else CONTEXT, env)[0]


def test_offline_the_plan_takes_one_minor_version_per_step_with_the_tables_versions():
    settings = _settings()
    current, steps = upgrade_plan.build(settings, "1.36", upgrade_plan.OfflineVersions())
    assert current == settings.eks.version == "1.34"
    assert [(s.before, s.after) for s in steps] == [("1.34", "1.35"), ("1.35", "1.36")]
    for step in steps:
        found = {s.addon.name: s.version for s in step.addons}
        for row in versions.ADDON_RELEASES:
            if step.after in row.kubernetes and row.addon in found:
                assert found[row.addon] == row.version
        # What no row names is left to the account, never guessed: the Pod Identity agent at every
        # step, the VPC CNI past the last Kubernetes version EKS's table lists it for (1.35).
        assert found["eks-pod-identity-agent"] is None
        assert (found["vpc-cni"] is None) == (step.after == "1.36")
        for unknown in (s for s in step.addons if versions.offline_addon_release(s.addon.name, step.after) is None):
            assert unknown.version is None
            assert f"describe-addon-versions --kubernetes-version {step.after} --addon-name {unknown.addon.name}" in unknown.source


def test_each_steps_cdk_json_change_is_a_config_that_validates():
    settings = _settings()
    _, steps = upgrade_plan.build(settings, "1.36", upgrade_plan.OfflineVersions())
    context = CONTEXT
    for step in steps:
        patch = upgrade_plan.cdk_json_change(settings, step)
        context = {**context, "environments": {**context["environments"],
                                               "dev": config.deep_merge(context["environments"]["dev"], patch)}}
        row = versions.offline_addon_release("kube-proxy", step.after)
        if row is None:
            # 1.36 has no row: the pin of 1.35 stays behind, built for another minor (versions.pins_off_version);
            # the step says so, and validate refuses it until the account's build for 1.36 is pinned.
            assert [line.split(" ", 1)[0] for line in step.left_behind] == ["eks.core_addons.kube_proxy.version"]
            with pytest.raises(config.ConfigError) as refused:
                validation.load_settings(context, "dev")
            assert any(l.startswith("dev: eks.core_addons.kube_proxy.version: 'v1.35.3-eksbuild.2' is built for Kubernetes 1.35, not 1.36")
                       for l in refused.value.problems), refused.value.problems
            text = upgrade_plan.to_text(settings, "1.34", "1.36", steps, upgrade_plan.OFFLINE_SOURCE)
            assert "LEFT BEHIND (validate refuses it at 1.36): eks.core_addons.kube_proxy.version v1.35.3-eksbuild.2 is built for" in text
            continue
        after, _ = validation.load_settings(context, "dev")
        assert after.eks.version == step.after and not step.left_behind
        assert after.eks.core_addons.kube_proxy.version == row.version


def test_an_unknown_task_governance_version_is_called_out_once_and_a_known_crossing_every_time():
    settings = _settings()
    _, steps = upgrade_plan.build(settings, "1.36", upgrade_plan.OfflineVersions())
    assert [s.migration for s in steps] == [None, False]
    text = upgrade_plan.to_text(settings, "1.34", "1.36", steps, upgrade_plan.OFFLINE_SOURCE)
    assert text.count("IF task governance is at v1.3.x, MIGRATE FIRST") == 1
    # The migration's own steps, in the upgrade page's order, around the deploy that updates the add-on.
    body = text[text.index("MIGRATE FIRST"):]
    assert body.index("back up every kueue") < body.index("deploy, which updates the add-on") < body.index("restore the objects")


def test_each_group_rolls_onto_the_new_ami_with_its_own_batch_or_its_pin():
    settings = _settings(patch=CAPABILITIES["cluster-options"])
    lines = upgrade_plan.ami_lines(settings, "1.34")
    system, gpu, reserved = lines
    # system: a custom AMI is rebuilt, not patched by UpdateClusterSoftware.
    assert "custom AMI" in system and "image_id" in system
    # gpu: its auto-patching batch (1 instance, 120 s apart).
    assert '"MaximumBatchSize":{"Type":"INSTANCE_COUNT","Value":1}' in gpu and '"WaitIntervalInSeconds":120' in gpu
    assert "--cluster-name hyperpod-dev-hp" in gpu and '[{"InstanceGroupName":"gpu"}]' in gpu
    # reserved: a pinned release moves by its pin, through the deploy.
    assert "image_release_version" in reserved and "UpdateClusterSoftware" in reserved
    scheduled = _settings(patch={"hyperpod": {"instance_groups": [
        {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 2,
         "scheduled_update": {"schedule": "cron(0 3 ? * SUN *)", "batch": {"unit": "percent", "value": 50}, "wait_seconds": 300,
                              "rollback_alarms": ["hyperpod-dev-node-health"]}},
        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1}]}})
    line = upgrade_plan.ami_lines(scheduled, "1.34")[0]
    assert '"Type":"CAPACITY_PERCENTAGE","Value":50' in line and '"AutoRollbackConfiguration":[{"AlarmName":"hyperpod-dev-node-health"}]' in line


@pytest.mark.parametrize(
    "target, says",
    [
        ("1.32", "EKS cannot downgrade a control plane"),
        (versions.fmt((1, versions.MAX_EKS_VERSION[1] + 1)), "the newest Kubernetes version aws-cdk-lib"),
        ("v1.34", "give a Kubernetes minor version"),
    ],
)
def test_a_target_it_cannot_reach_is_refused_in_one_line(target, says, capsys):
    assert cli.main(["upgrade-plan", "--to", target]) == 2
    err = capsys.readouterr().err
    (line,) = [l for l in err.splitlines() if l.startswith("error: ")]
    assert says in line and "Traceback" not in err


def test_the_newest_target_is_the_newest_kubernetes_version_aws_cdk_lib_offers():
    # The installed aws-cdk-lib's own list (aws_eks_v2.KubernetesVersion), not a copied number.
    from aws_cdk import aws_eks_v2 as eks

    offered = [tuple(int(n) for n in name[1:].split("_")) for name in dir(eks.KubernetesVersion) if name.startswith("V1_")]
    assert max(offered) == versions.MAX_EKS_VERSION


def test_the_same_version_is_nothing_to_do(capsys):
    assert cli.main(["upgrade-plan", "--to", "1.34"]) == 0
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["1.34", "1.35"])
def test_every_plan_says_how_nodes_made_before_the_metadata_guard_get_it(capsys, target):
    # HyperPod runs OnCreate on new and replaced nodes only; UpdateClusterSoftware re-runs the
    # lifecycle scripts on a whole group (HyperPod docs, "Updating a cluster with new or updated
    # lifecycle scripts"). Each command is an operation of botocore's SageMaker model, with its
    # parameters as the CLI spells them.
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    assert cli.main(["upgrade-plan", "--to", target, "-c", "env=prod"]) == 0
    out = capsys.readouterr().out
    guard = out[out.index("existing nodes:"):]
    for group in _settings("prod").hyperpod.instance_groups:
        assert f'--instance-groups \'[{{"InstanceGroupName":"{group.name}"}}]\'' in guard
    for command, operation in (("update-cluster-software", "UpdateClusterSoftware"), ("batch-replace-cluster-nodes", "BatchReplaceClusterNodes")):
        members = model.operation_model(operation).input_shape.members
        line = next(l for l in guard.splitlines() if f"aws sagemaker {command} " in l)
        flags = {w[2:] for w in line.split() if w.startswith("--") and w not in ("--region",)}
        assert flags <= {"".join(("-" + c.lower()) if c.isupper() else c for c in m).lstrip("-") for m in members}, (command, flags)


def test_each_step_says_how_to_roll_it_back_within_eks_window_and_what_stays(capsys):
    # EKS user guide, rollback-cluster: one minor version back within 7 days by UpdateClusterVersion, nodes and
    # add-ons first (neither is reverted), ROLLBACK_READINESS insights block it. Each call is one of botocore's eks
    # model, with the parameters and enums the plan's lines use.
    import botocore.session

    eks = botocore.session.get_session().get_service_model("eks")
    assert "ROLLBACK_READINESS" in eks.shape_for("Category").enum and "VersionRollback" in eks.shape_for("UpdateType").enum
    assert "rollback-blocking readiness checks" in eks.operation_model("UpdateClusterVersion").input_shape.members["force"].documentation
    assert "upgradePolicy" in eks.operation_model("UpdateClusterConfig").input_shape.members
    assert cli.main(["upgrade-plan", "--to", "1.35", "-c", "env=prod"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("  rollback, if 1.35 must be undone"):out.index("existing nodes:")]
    assert f"within {versions.ROLLBACK_WINDOW_DAYS} days" in block and versions.ROLLBACK_PAGE in block
    assert "does NOT revert: the add-ons, HyperPod's nodes and their AMI" in block and "CRD migration" in block
    steps = [block.index(f"r{i}. ") for i in range(1, 7)]
    assert steps == sorted(steps)  # insights, nodes, add-ons, control plane, its update, cdk.json: the page's order
    # Only what the step moved goes back: prod pins kube-proxy to the 1.34 build, which the step moves to 1.35's.
    r3 = next(line for line in block.splitlines() if "r3. " in line)
    assert "kube-proxy v1.34.6-eksbuild.2" in r3 and "vpc-cni" not in r3
    assert "--kubernetes-version 1.34" in block and "list-insights" in block and '"ROLLBACK_READINESS"' in block
    for command, operation in (("update-cluster-version", "UpdateClusterVersion"), ("describe-update", "DescribeUpdate"),
                               ("update-addon", "UpdateAddon"), ("list-insights", "ListInsights")):
        line = next(l for l in block.splitlines() if f"aws eks {command} " in l)
        members = {"".join(("-" + c.lower()) if c.isupper() else c for c in m).lstrip("-") for m in eks.operation_model(operation).input_shape.members}
        flags = {w[2:] for w in line[line.index(f"aws eks {command} "):].split() if w.startswith("--") and w not in ("--region", "--force")}
        assert flags <= members | {"kubernetes-version"}, (command, flags - members)  # the CLI's name for `version`
    # STANDARD on a 1.35 cluster rolling back to 1.34, past standard support: EXTENDED first, as the page says.
    settings = _settings("dev", {"eks": {"version": "1.35", "upgrade_policy": "STANDARD"}})
    _, steps = upgrade_plan.build(settings, "1.36", upgrade_plan.OfflineVersions())
    assert not any("r4a." in line for line in upgrade_plan.rollback_lines(settings, steps[0], {}))
    step = upgrade_plan.Step("1.34", "1.35", [])
    assert any("supportType=EXTENDED" in line for line in upgrade_plan.rollback_lines(settings, step, {}))


# ------------------------------------------------------------------ with credentials


def _eks(responses):
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for method, answer, params in responses:
        if isinstance(answer, str):
            stub.add_client_error(method, service_error_code=answer, http_status_code=404, expected_params=params)
        else:
            stub.add_response(method, answer, params)
    stub.activate()
    return client, stub


def _versions(name: str, kubernetes: str, offered: list[str], default: str) -> dict:
    return {"addons": [{"addonName": name, "type": "networking", "addonVersions": [
        {"addonVersion": v, "architecture": ["amd64"], "requiresConfiguration": False, "requiresIamPermissions": False,
         "compatibilities": [{"clusterVersion": kubernetes, "platformVersions": ["*"], "defaultVersion": v == default}]}
        for v in offered]}]}


def test_with_credentials_the_account_gives_the_version_the_add_ons_and_the_crossing():
    settings = _settings()
    addons = upgrade_plan.addons_of(settings)
    cluster = settings.eks_cluster_name
    created = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
    deployed = {"amazon-sagemaker-hyperpod-taskgovernance": "v1.3.0-eksbuild.1", "coredns": "v1.11.4-eksbuild.33"}
    responses = [("describe_cluster", {"cluster": {"name": cluster, "version": "1.34", "status": "ACTIVE", "createdAt": created}},
                  {"name": cluster}),
                 ("describe_cluster_versions", {"clusterVersions": [{"clusterVersion": "1.35", "versionStatus": "STANDARD_SUPPORT"}]},
                  {"clusterVersions": ["1.35"]})]
    for a in addons:
        params = {"clusterName": cluster, "addonName": a.name}
        if a.name in deployed:
            responses.append(("describe_addon", {"addon": {"addonName": a.name, "clusterName": cluster, "status": "ACTIVE",
                                                           "addonVersion": deployed[a.name]}}, params))
        else:
            responses.append(("describe_addon", "ResourceNotFoundException", params))
    for a in addons:
        offered = {"amazon-sagemaker-hyperpod-taskgovernance": ["v1.6.0-eksbuild.1", "v1.5.0-eksbuild.1"],
                   "cert-manager": []}.get(a.name, [f"v9.0.{len(a.name)}-eksbuild.1", "v9.0.0-eksbuild.1"])
        default = offered[0] if offered else ""
        responses.append(("describe_addon_versions", _versions(a.name, "1.35", offered, default) if offered else {"addons": []},
                          {"kubernetesVersion": "1.35", "addonName": a.name}))
    responses.append(("list_insights", {"insights": [
        {"id": "a1", "name": "Deprecated APIs removed in Kubernetes v1.35", "category": "UPGRADE_READINESS", "kubernetesVersion": "1.35",
         "insightStatus": {"status": "ERROR", "reason": "Deprecated API usage detected within last 30 days"}},
        {"id": "a2", "name": "Kubelet version skew", "category": "UPGRADE_READINESS", "kubernetesVersion": "1.35",
         "insightStatus": {"status": "PASSING", "reason": "No issue detected"}}]},
        {"clusterName": cluster, "filter": {"categories": ["UPGRADE_READINESS"], "kubernetesVersions": ["1.35"]}}))
    client, stub = _eks(responses)
    current, steps = upgrade_plan.build(settings, "1.35", upgrade_plan.AccountVersions(client))
    stub.assert_no_pending_responses()
    assert current == "1.34" and [(s.before, s.after) for s in steps] == [("1.34", "1.35")]
    (step,) = steps
    found = {s.addon.name: s for s in step.addons}
    # The version EKS marks default for 1.35 is the one pinned.
    assert found["coredns"].version == f"v9.0.{len('coredns')}-eksbuild.1" and "the default" in found["coredns"].source
    # An add-on the account lists nothing for is a deploy failure, said as such.
    assert found["cert-manager"].version is None and "CreateAddon and UpdateAddon fail" in found["cert-manager"].source
    # Deployed v1.3.0, offered v1.6.0 as the default: the CRD migration comes first.
    assert step.migration is True and step.migration_to == "v1.6.0-eksbuild.1"
    text = upgrade_plan.to_text(settings, current, "1.35", steps, "the account (DescribeAddonVersions)")
    assert "2. MIGRATE FIRST: the task governance add-on goes to v1.6.0-eksbuild.1" in text
    # EKS's upgrade insights: what is not passing comes first, what passes is left out.
    assert step.insights == ["ERROR: Deprecated APIs removed in Kubernetes v1.35: Deprecated API usage detected within last 30 days"]
    assert "RESOLVE FIRST, EKS upgrade insight ERROR: Deprecated APIs removed" in text and "Kubelet version skew" not in text


def test_with_credentials_a_version_eks_does_not_offer_is_refused():
    settings = _settings()
    created = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
    client, _ = _eks([
        ("describe_cluster", {"cluster": {"name": settings.eks_cluster_name, "version": "1.33", "createdAt": created}},
         {"name": settings.eks_cluster_name}),
        ("describe_cluster_versions", {"clusterVersions": []}, {"clusterVersions": ["1.34"]}),
    ])
    with pytest.raises(upgrade_plan.Refused, match="EKS does not offer Kubernetes 1.34 in this region"):
        upgrade_plan.build(settings, "1.34", upgrade_plan.AccountVersions(client))


def test_with_credentials_a_missing_cluster_is_one_line():
    settings = _settings()
    client, _ = _eks([("describe_cluster", "ResourceNotFoundException", {"name": settings.eks_cluster_name})])
    with pytest.raises(upgrade_plan.Refused, match="no EKS cluster named hyperpod-dev in us-east-1; drop --from-account"):
        upgrade_plan.build(settings, "1.35", upgrade_plan.AccountVersions(client))


def test_on_an_existing_cluster_its_owner_upgrades_the_control_plane_and_only_our_add_ons_are_pinned():
    # Validation refuses core add-on pins on a cluster that is not ours (they would do nothing), so the
    # plan must not propose them; and a deploy cannot move a control plane it does not own.
    settings = _settings("dev", CAPABILITIES["existing-cluster"])
    current, steps = upgrade_plan.build(settings, "1.35", upgrade_plan.OfflineVersions())
    names = {s.addon.name for s in steps[0].addons}
    assert not names & {"vpc-cni", "kube-proxy", "coredns"}
    context = patched_context("dev", config.deep_merge(CAPABILITIES["existing-cluster"], upgrade_plan.cdk_json_change(settings, steps[0])))
    problems = validation.load_settings(context, "dev")  # raises ConfigError on a refused field
    assert problems[0].eks.version == "1.35"
    text = upgrade_plan.to_text(settings, current, "1.35", steps, upgrade_plan.OFFLINE_SOURCE)
    assert (f"aws eks update-cluster-version --region {settings.region} --name {settings.eks.existing_cluster.name} "
            "--kubernetes-version 1.35") in text
    assert "the control plane first" not in text


def test_with_credentials_a_pin_across_the_migration_comes_first_even_at_the_same_kubernetes_version():
    settings = _settings(patch={"addons": {"task_governance": {"version": "v1.6.0-eksbuild.1"}}})
    cluster = settings.eks_cluster_name
    client, stub = _eks([("describe_addon", {"addon": {"addonName": upgrade_plan.TASK_GOVERNANCE, "clusterName": cluster,
                                                       "addonVersion": "v1.3.1-eksbuild.1"}},
                          {"clusterName": cluster, "addonName": upgrade_plan.TASK_GOVERNANCE})])
    pending = upgrade_plan.pending_migration(settings, upgrade_plan.AccountVersions(client))
    stub.assert_no_pending_responses()
    assert pending == ("v1.3.1-eksbuild.1", "v1.6.0-eksbuild.1")
    text = upgrade_plan.to_text(settings, "1.34", "1.34", [], "the account (DescribeAddonVersions)", pending)
    assert text.startswith("before anything else: task governance runs v1.3.1-eksbuild.1 and config pins v1.6.0-eksbuild.1")
    assert "2. MIGRATE FIRST" in text and "nothing else to do" in text
    # Offline, what is deployed is the pin: nothing pending.
    assert upgrade_plan.pending_migration(settings, upgrade_plan.OfflineVersions()) is None


def test_every_step_deploys_whatever_task_governances_version_turns_out_to_be():
    # Step 1 crosses the Kueue CRD migration only if the cluster runs task governance v1.3.x, which offline
    # nobody knows: the step must deploy either way, not only inside the migration's branch.
    settings = _settings()
    _, steps = upgrade_plan.build(settings, "1.35", upgrade_plan.OfflineVersions())
    text = upgrade_plan.to_text(settings, "1.33", "1.35", steps, upgrade_plan.OFFLINE_SOURCE)
    deploy = "hyperpod-cdk validate -c env=dev && hyperpod-cdk review --env dev && cdk deploy --all -c env=dev"
    for n, body in enumerate(text.split("\nstep ")[1:], 1):
        unconditional = [line for line in body.splitlines() if deploy in line and "updates the add-on" not in line]
        assert len(unconditional) == 1, (n, body)
    first = text.split("\nstep ")[1]
    assert "otherwise (v1.5 or later already), deploy" in first


# ------------------------------------------------------------------ pins for the version the cluster runs


def test_write_pins_pins_every_unpinned_add_on_with_the_accounts_default_and_the_config_validates(tmp_path, capsys, monkeypatch):
    # prod: what tenancy rests on and no offline table versions for 1.34 (the Pod Identity agent,
    # observability; the VPC CNI and task governance are pinned from the table): the account's
    # DescribeAddonVersions default for the cluster's version is what gets pinned.
    import json

    from tests.conftest import cdk_project

    settings = _settings("prod")
    unpinned = [a for a in upgrade_plan.addons_of(settings) if not a.pinned]
    assert {a.name for a in unpinned} >= {"amazon-sagemaker-hyperpod-observability", "eks-pod-identity-agent"}
    assert not {"vpc-cni", "amazon-sagemaker-hyperpod-taskgovernance"} & {a.name for a in unpinned}
    cluster = settings.eks_cluster_name
    created = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
    responses = [("describe_cluster", {"cluster": {"name": cluster, "version": "1.34", "status": "ACTIVE", "createdAt": created}}, {"name": cluster})]
    # The Pod Identity agent runs already (EKS's default at create): pinned as it runs, so the deploy changes nothing.
    for a in unpinned:
        params = {"clusterName": cluster, "addonName": a.name}
        if a.name == "eks-pod-identity-agent":
            responses.append(("describe_addon", {"addon": {"addonName": a.name, "clusterName": cluster, "status": "ACTIVE",
                                                           "addonVersion": "v1.3.10-eksbuild.1"}}, params))
            continue
        responses.append(("describe_addon", "ResourceNotFoundException", params))
        offered = [f"v2.1.{len(a.name)}-eksbuild.1", "v2.0.0-eksbuild.1"]
        responses.append(("describe_addon_versions", _versions(a.name, "1.34", offered, offered[0]),
                          {"kubernetesVersion": "1.34", "addonName": a.name}))
    client, stub = _eks(responses)
    project = cdk_project(CONTEXT, tmp_path / "project")
    monkeypatch.chdir(project)
    out = upgrade_plan.written_pins(settings, upgrade_plan.AccountVersions(client), "1.34", project / "cdk.json")
    stub.assert_no_pending_responses()
    pinned, _ = validation.load_settings(json.loads((project / "cdk.json").read_text())["context"], "prod")
    assert not [a.name for a in upgrade_plan.addons_of(pinned) if not a.pinned]
    assert pinned.eks.core_addons.pod_identity_agent.version == "v1.3.10-eksbuild.1"
    assert pinned.eks.core_addons.vpc_cni.version == settings.eks.core_addons.vpc_cni.version == "v1.21.1-eksbuild.7"
    assert pinned.addons.observability.version == f"v2.1.{len('amazon-sagemaker-hyperpod-observability')}-eksbuild.1"
    assert pinned.addons.task_governance.version == settings.addons.task_governance.version == "v1.6.0-eksbuild.1"
    # What was pinned before stays as it was; every new pin is named with its source.
    assert pinned.addons.training_operator.version == settings.addons.training_operator.version
    assert out.count("DescribeAddonVersions, the default") == len(unpinned) - 1 and out.count("the version the cluster runs") == 1
    # Pins are for the version the cluster runs, not a later one.
    with pytest.raises(upgrade_plan.Refused, match="--write-pins: pins are for the version the cluster runs"):
        upgrade_plan.written_pins(settings, upgrade_plan.OfflineVersions(), "1.35", project / "cdk.json")
    assert cli.main(["upgrade-plan", "--to", "1.35", "-c", "env=prod", "--write-pins"]) == 2
    assert "error: --write-pins: pins are for the version the cluster runs (1.34), not --to 1.35" in capsys.readouterr().err
