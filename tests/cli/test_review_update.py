"""The review of changes that reach past one resource, on pairs of assemblies synthesized in the
test: GPUs cut into MIG slices (the chart's device plugin swapped for the GPU operator), Karpenter
turned on (continuous provisioning, an autoscaled group's cost range), a GPU type with no price,
and where SARIF shows a refusal and a job restart. Each asserts the exact callouts and the
cdk.json line of each."""

from __future__ import annotations

import copy

import pytest

from cli.review import report as review
from cli.review import changes, cost, prices, sarif
from cli.review.assembly import load_stacks
from tests.cli.test_review_changes import GROWN, GROWN_JOB_ON_TWO
from tests.cli.test_sarif import CHANGES, _field_text, _project
from tests.conftest import CAPABILITIES


def _review(synth, base, new, env: str = "dev") -> dict:
    """`new` against `base`: each a capability's name, a patch of `env`, or None for `env` itself."""
    base_s, new_s = (synth(p) if isinstance(p, str) else synth(env, p) for p in (base, new))
    return review.build(new_s.outdir, against=changes.load_baseline([str(base_s.outdir)], []), with_lint=False, with_cdk_diff=False)


def _places(report: dict, patch: dict, tmp_path, env: str = "dev") -> dict[str, str]:
    """callout kind -> the text of cdk.json its SARIF result is at (the project holding the change)."""
    project = _project(tmp_path, patch, env=env)
    results = sarif.log(report, project=project, env=env)["runs"][0]["results"]
    return {r["message"]["text"].split(":")[0]: _field_text(project, r) for r in results if r["ruleId"].startswith("change/")}


def _whole_gpus(mig: dict) -> dict:
    """The mig capability before its GPUs were cut: the same group, teams and job on whole GPUs."""
    whole = copy.deepcopy(mig)
    for group in whole["hyperpod"]["instance_groups"]:
        group.pop("mig_profile", None)
    research, inference = whole["governance"]["teams"]
    # The job (research's, on the whole node) fits research's guarantee: the admission model refuses any less.
    research["quotas"] = [{"instance_type": "ml.p5.48xlarge", "count": 1}]
    research["absolute_borrow_limits"][0] = {"instance_type": "ml.p5.48xlarge", "accelerators": 2}
    inference["quotas"] = [{"instance_type": "ml.m5.4xlarge", "vcpu": 8}]
    del whole["sample_job"]["gpu_partition"]
    return whole


WHOLE_GPUS = _whole_gpus(CAPABILITIES["mig"])


def test_cutting_gpus_into_mig_slices_is_called_out_cluster_wide_and_the_job_counts_slices_not_gpus(synth, tmp_path):
    def limits(config) -> dict:
        s = synth(config) if isinstance(config, str) else synth("dev", config)
        job = next(o for o in s.manifests("sample-job") if o["kind"] == "HyperPodPyTorchJob")
        return job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]

    report = _review(synth, WHOLE_GPUS, "mig")
    profile = CAPABILITIES["mig"]["hyperpod"]["instance_groups"][1]["mig_profile"]
    assert report["changes"]["callouts"] == [
        # The label is reconciled on the running nodes (cli/review/replacement.py): no roll; the MIG callout says what it does.
        "TEAM QUOTA: team inference: guaranteed ml.m5.4xlarge: 8 vCPUs -> none; guaranteed ml.p5.48xlarge: none -> 8 mig-4g.40gb "
        "slices; guaranteed ml.p5.48xlarge: none -> 64 vCPUs; guaranteed ml.p5.48xlarge: none -> 512 GiB of memory",
        "TEAM QUOTA: team research: guaranteed ml.p5.48xlarge: 1 instance -> none; guaranteed ml.p5.48xlarge: none -> 16 "
        "mig-1g.10gb slices; may borrow at most ml.p5.48xlarge: 2 GPUs -> none; may borrow at most ml.p5.48xlarge: none -> 8 "
        "mig-1g.10gb slices",
        f"MIG: every GPU of instance group gpu in hyperpod-dev-hyperpod is re-partitioned (nvidia.com/mig.config (none) -> {profile}): "
        "the GPU operator's MIG manager needs no workload running on those GPUs, so the jobs on them stop",
        "GPU OPERATOR: chart hyperpod-dependencies swaps its NVIDIA device plugin for the GPU operator on every GPU node of the "
        "cluster (nvidia-device-plugin.devicePlugin.enabled true -> false, gpu-operator.enabled (unset) -> true): until the "
        "operator's device plugin registers, no node advertises its GPUs and no GPU pod is scheduled",
        "JOB RESTARTS: the running job llama3-1-8b-fsdp restarts: its object changes (container.command, container.env, "
        "container.resources, pod.volumes, spec.nprocPerNode) (GPUs 8 -> 0, MIG slices 0 -> 1 x 1g.10gb, nodes 1, processes per "
        f"node 8 -> 1, memory per node {limits(WHOLE_GPUS)['memory']} -> {limits('mig')['memory']})",
    ]
    # What the job's own manifests ask for: 8 whole GPUs, then one nvidia.com/mig-1g.10gb slice and no whole GPU.
    assert limits(WHOLE_GPUS)["nvidia.com/gpu"] == 8
    assert limits("mig").get("nvidia.com/mig-1g.10gb") == 1 and "nvidia.com/gpu" not in limits("mig")
    assert any(line.startswith("Chart hyperpod-dependencies values: nvidia-device-plugin.devicePlugin.enabled true -> false; "
                               "gpu-operator.enabled (unset) -> true") for line in report["changes"]["deltas"]["lines"]["cluster"])
    places = _places(report, CAPABILITIES["mig"], tmp_path)
    assert places == {"TEAM QUOTA": places["TEAM QUOTA"], "MIG": f'"mig_profile": "{profile}"',
                      "GPU OPERATOR": f'"mig_profile": "{profile}"',
                      "JOB RESTARTS": '"gpu_partition": "1g.10gb"'}
    assert places["TEAM QUOTA"].startswith('"quotas": [{"instance_type": "ml.p5.48xlarge", "accelerator_partition"')


def test_karpenter_switches_the_cluster_to_continuous_provisioning_and_costs_a_range(synth, tmp_path):
    import botocore.session

    report = _review(synth, None, "karpenter")
    (mode,) = [c for c in report["changes"]["callouts"] if c.startswith("PROVISIONING MODE:")]
    assert mode.startswith("PROVISIONING MODE: the HyperPod cluster in hyperpod-dev-hyperpod switches to continuous provisioning "
                           "(NodeProvisioningMode (unset) -> Continuous)")
    # "no update sets it back": UpdateCluster's mode takes one value (botocore's SageMaker model).
    update = botocore.session.get_session().get_service_model("sagemaker").operation_model("UpdateCluster").input_shape
    assert update.members["NodeProvisioningMode"].enum == ["Continuous"]
    assert _places(report, CAPABILITIES["karpenter"], tmp_path)["PROVISIONING MODE"] == '"autoscaling": "karpenter"'
    # The autoscaled group from 0 to the nodes its NodePool's limit admits (the template's NodePool: GPUs over 1 GPU a node).
    pool = next(o for o in synth("karpenter").manifests("hyperpod") if o["kind"] == "NodePool")
    most = int(pool["spec"]["limits"]["nvidia.com/gpu"]) // 1
    # The quota it asks for is that number, not a pointer to the config.
    assert (f"Quota: ml.g5.8xlarge for cluster usage: 1 -> 0 node(s) at deploy (autoscaled from 0 by Karpenter: the quota "
            f"must cover {most} node(s), the most its NodePool admits)") in report["changes"]["deltas"]["lines"]["quotas"]
    rate = prices.SAGEMAKER_RATE["ml.g5.8xlarge"]
    (gpu,) = [line for line in report["cost"]["lines"] if "(gpu" in line["item"]]
    assert gpu["item"] == f"0 to {most} x ml.g5.8xlarge (gpu, autoscaled by Karpenter)"
    assert (gpu["hourly"], gpu["hourly_max"], gpu["max_count"]) == (0, round(most * rate, 4), most)
    assert report["cost"]["hourly_max"] == pytest.approx(report["cost"]["hourly"] + most * rate, abs=0.01)
    assert f"| {gpu['item']} | $0.00 to ${most * rate:,.2f} |" in "\n".join(cost.markdown(report["cost"]))
    (line,) = report["changes"]["deltas"]["lines"]["cost"]
    dev = cost.estimate(load_stacks(synth("dev").outdir), "us-east-1")["hourly"]  # no autoscaled group: its most is its total
    assert line.endswith(f"; with the autoscaled groups at their most ${dev:,.2f} -> ${report['cost']['hourly_max']:,.2f} an hour")


UNPRICED = {
    "hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                     {"name": "gpu", "instance_type": "ml.g7e.8xlarge", "count": 1}]},
    "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.g7e.8xlarge", "count": 1}]}]},
}


def test_a_type_without_a_price_is_never_0_dollars_and_the_change_says_its_known_part(synth, tmp_path, monkeypatch):
    # Every type the catalogue accepts has a price or a floor (the test below); a type it gains before the table does has
    # neither: here g7e, as the table was before its EC2 rows, with no SageMaker rate, no EC2 row of its family and no
    # priced type it holds (cli/review/prices.py).
    without_g7e = {t: r for t, r in prices.INSTANCE_FLOOR.items() if not t.startswith("ml.g7e.")}
    monkeypatch.setattr(prices, "INSTANCE_FLOOR", without_g7e)
    assert prices.instance_rate("ml.g7e.8xlarge") == (None, "unpriced")
    report = _review(synth, None, UNPRICED)
    assert [c.split(":")[0] for c in report["changes"]["callouts"]] == ["NODES REPLACED", "NEW QUOTA", "TEAM QUOTA", "JOB RESTARTS"]
    why = ("no price in the table for ml.g7e.8xlarge (neither SageMaker's rate, EC2's floor nor a stated floor); a total "
           "without it would be wrong")
    assert report["cost"]["hourly"] is None and report["cost"]["monthly"] is None and report["cost"]["no_total"] == why
    # The g5 node goes and a g7e comes: the priced part falls by the g5's rate, the g7e's is not known, so no direction.
    (line,) = report["changes"]["deltas"]["lines"]["cost"]
    before = cost.estimate(load_stacks(synth("dev").outdir), "us-east-1")["hourly"]
    known = report["cost"]["known_hourly"]
    assert line == (f"Cost: direction not known (the priced part ${before:,.2f} -> ${known:,.2f} an hour; not priced: "
                    f"1 x ml.g7e.8xlarge (gpu): {prices.UNPRICED_WHY})")
    assert known == pytest.approx(before - prices.SAGEMAKER_RATE["ml.g5.8xlarge"], abs=0.01)
    text = "\n".join(cost.markdown(report["cost"]))
    assert f"**no total**: {why}" in text and "| 1 x ml.g7e.8xlarge (gpu) | unpriced | unpriced |" in text
    # This update replaces the group's nodes (an instance type change), and its plan says so.
    plan = report["changes"]["update_plan"]
    assert plan["waits"][0].startswith("nodes replaced: every node of group gpu (1 x ml.g7e.8xlarge)")
    places = _places(report, UNPRICED, tmp_path)
    assert places["NODES REPLACED"] == '"instance_type": "ml.g7e.8xlarge"'
    assert places["TEAM QUOTA"] == '"quotas": [{"instance_type": "ml.g7e.8xlarge", "count": 1}]'


def test_every_type_the_catalogue_takes_has_a_price_or_a_floor_with_its_source():
    from infra import catalogue

    for kind in catalogue.CATALOGUE.values():
        rate, how = prices.instance_rate(kind.name)
        assert how in ("sagemaker", "floor") and rate > 0, kind.name  # no gap, and never $0
        if how == "floor" and kind.name not in prices.INSTANCE_FLOOR:
            # A stated floor names the priced type it comes from, and that type's rate is a row of a table.
            note = prices.floor_note(kind.name)
            source = note.split(" x ", 1)[1].split("'s $", 1)[0]
            assert prices.SAGEMAKER_RATE.get(source) or prices.INSTANCE_FLOOR.get(source), note
    # Each family has a row of its own in a table, or is one GENERATION_FLOORS names with its reason.
    rows = {name.split(".")[1] for name in (*prices.SAGEMAKER_RATE, *prices.INSTANCE_FLOOR)}
    assert {name.split(".")[1] for name in catalogue.CATALOGUE} - rows <= set(prices.GENERATION_FLOORS)
    # What HyperPod's named training types are priced at: never a gap (p5en/p6 at EC2's rate; p5e, p6e-gb200 and trn2,
    # with no On-Demand row in EC2_FLOOR_SOURCE, at a stated floor from p5 and trn1).
    for name in ("ml.p5en.48xlarge", "ml.p5e.48xlarge", "ml.p6-b200.48xlarge", "ml.p6e-gb200.36xlarge", "ml.trn2.48xlarge",
                 "ml.trn2.3xlarge", "ml.p6-b300.48xlarge", "ml.p5.4xlarge"):
        assert prices.instance_rate(name)[1] == "floor", name
    assert prices.floor_note("ml.p5e.48xlarge").startswith("at least 1 x ml.p5.48xlarge's $55.04")
    assert prices.floor_note("ml.trn2.48xlarge").startswith("at least 1 x ml.trn1.32xlarge's $21.5")
    # GENERATION_FLOORS' rule holds where EC2 prices both generations: each newer one at or above the one it succeeds.
    for newer in ("ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge"):
        assert prices.INSTANCE_FLOOR[newer] >= prices.INSTANCE_FLOOR["ml.p5.48xlarge"], newer
    # A size of a CPU family at its share of the family's row: EC2_FLOOR_SOURCE's own m6i.large is $0.096, m7g.large
    # $0.0816 (factualminds.com's us-east-1 figure, 2026-06-17, alike); a GPU size at its own row, not a share.
    assert prices.instance_rate("ml.m6i.large") == (0.096, "floor")
    assert prices.instance_rate("ml.m7g.large") == (0.0816, "floor")
    assert prices.instance_rate("ml.g7e.2xlarge") == (prices.INSTANCE_FLOOR["ml.g7e.2xlarge"], "floor")
    assert prices.floor_note("ml.g7e.2xlarge") is None


def test_a_p5_to_p5en_change_is_priced_at_the_p5en_floor(synth):
    report = _review(synth, None, {**UNPRICED, "hyperpod": {"instance_groups": [
        {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1}, {"name": "gpu", "instance_type": "ml.p5en.48xlarge", "count": 1}]},
        "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5en.48xlarge", "count": 1}]}]}})
    (gpu,) = [line for line in report["cost"]["lines"] if "(gpu)" in line["item"]]
    # EC2's own p5en rate, above p5's (the stated floor from p5 it had before EC2_FLOOR_SOURCE gave it).
    assert gpu["floor"] and gpu["hourly"] == prices.INSTANCE_FLOOR["ml.p5en.48xlarge"] > prices.INSTANCE_FLOOR["ml.p5.48xlarge"]
    assert gpu["note"].startswith("a floor: EC2 On-Demand rate of the same hardware")
    (line,) = report["changes"]["deltas"]["lines"]["cost"]
    assert line.startswith("Cost: +$") and "ml.p5en.48xlarge priced at a floor" in line


def test_a_refusal_and_a_job_restart_are_shown_at_the_field_that_changed(synth, tmp_path):
    # GitHub shows a pull request's alerts only on the lines it changed: the refusal at the renamed field, not the stack's
    # class; the restart at the job's field that changed, not at "sample_job": {.
    renamed = _review(synth, None, CHANGES["rename"])
    assert [c.split(":")[0] for c in renamed["changes"]["callouts"] if c.startswith("REFUSED")] == ["REFUSED"]
    assert _places(renamed, CHANGES["rename"], tmp_path / "rename")["REFUSED"] == '"cluster_name": "renamed-hp"'
    restarted = _review(synth, GROWN, GROWN_JOB_ON_TWO)
    assert _places(restarted, GROWN_JOB_ON_TWO, tmp_path / "job")["JOB RESTARTS"] == '"nodes": 2'


BIGGER_VOLUMES = {"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                                   {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1, "ebs_volume_gb": 1000}]}}


def test_a_change_that_rolls_the_nodes_plans_the_roll_and_the_gates_not_a_first_deploy(synth):
    from infra import timing

    report = _review(synth, None, BIGGER_VOLUMES)
    assert [c.split(":")[0] for c in report["changes"]["callouts"]] == ["NODES ROLL", "JOB RESTARTS"]  # its scratch is sized by the volume
    # The node gate carries the group's volumes (its NodeSpecs: volumes are attached when a node is created), so their
    # change is a roll the plan waits for: every node of the group, as long as the group's nodes take to start.
    (gate,) = [r for r in synth("dev", BIGGER_VOLUMES).resources("hyperpod", "Custom::HyperPodNodesReady").values()
               if r["Properties"]["Link"].startswith("1/")]
    assert "InstanceStorageConfigs" in gate["Properties"]["NodeSpecs"]["gpu"]
    minutes = timing.node_minutes(accelerated=True, efa_interfaces=1, count=1, checks=[])
    plan = report["changes"]["update_plan"]
    assert plan["waits"][0] == f"nodes roll: every node of group gpu (1 x ml.g5.8xlarge) (~{minutes:.0f} min)"
    assert "the node gate re-runs" in plan["waits"] and plan["minutes"] < report["deploy_plan"]["minutes"]
