"""Teams as one unit (issue 22): quotas by every resource the schema has, MIG slices end to
end, and who may submit where, each held against the schemas, the chart and the NVIDIA and
SageMaker documentation rather than against this package's own tables."""

from __future__ import annotations

import json

import pytest

from addons import task_governance as tg
from infra import catalogue, cfn_schema, config, hyperpod_chart, naming, validation
from manifests import teams
from tests.conftest import CAPABILITIES, ENVIRONMENTS, patched_context


def _problems(patch: dict, env: str = "dev") -> list[str]:
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context(env, patch), env)
    return err.value.problems


def _schema_paths(schema: dict, node: dict, prefix: str = "") -> set[str]:
    """Every property path of a registry schema, dotted through objects and list items."""
    out = set()
    for name, prop in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        out.add(path)
        target = prop.get("items", prop)
        while "$ref" in target:
            target = schema["definitions"][target["$ref"].split("/")[-1]]
            target = target.get("items", target)
        if name != "Tags" and (target.get("type") == "object" or "properties" in target):
            out |= _schema_paths(schema, target, path + ".")
    return out


# ------------------------------------------------------------------ every schema property


@pytest.mark.parametrize(
    "type_, coverage",
    [("AWS::SageMaker::ComputeQuota", tg.QUOTA_COVERAGE), ("AWS::SageMaker::ClusterSchedulerConfig", tg.SCHEDULER_COVERAGE)],
)
def test_every_quota_and_scheduler_property_is_mapped_or_left_out_with_a_reason(synth, type_, coverage):
    schema = cfn_schema.resource(type_)
    paths = _schema_paths(schema, schema)
    unplaced = paths - set(coverage) - set(tg.LEFT_OUT)
    assert not unplaced, f"map these from config or list them in LEFT_OUT with a reason: {sorted(unplaced)}"
    assert not set(coverage) - paths, "coverage names properties the schema does not have"
    read_only = {p.split("/")[-1] for p in schema["readOnlyProperties"]}
    assert {k for k in tg.LEFT_OUT if k in paths} <= read_only
    # Each mapped property reaches a template of dev, prod or the mig config.
    seen = {"Tags"}  # CDK adds them at deploy from the stack's tags

    def walk(value, prefix=""):
        if isinstance(value, list):
            for item in value:
                walk(item, prefix)
        elif isinstance(value, dict) and not any(k.startswith("Fn::") or k == "Ref" for k in value):
            for k, v in value.items():
                seen.add(prefix + k)
                walk(v, prefix + k + ".")

    for name in ("dev", "prod", "mig"):
        for res in synth(name).resources("addons", type_).values():
            walk(res["Properties"])
    assert set(coverage) <= seen, sorted(set(coverage) - seen)


def test_mig_profiles_are_exactly_the_partition_types_the_schema_and_the_api_take():
    import botocore.session

    ours = {f"mig-{p}" for profiles in catalogue.MIG_PROFILES.values() for p in profiles}
    schema = cfn_schema.definition("AWS::SageMaker::ComputeQuota", "AcceleratorPartitionConfig")["properties"]["Type"]["enum"]
    api = botocore.session.get_session().get_service_model("sagemaker").shape_for("AcceleratorPartitionConfig").members["Type"].enum
    assert ours == set(schema) == set(api)


def test_mig_slices_of_a_gpu_fit_its_seven_compute_units_and_the_chart_configs_fit_some_gpu():
    # NVIDIA's MIG user guide: 7 compute slices per GPU; a 1g profile fits 7 times, 2g 3, 3g 2, 4g and 7g once.
    fit = {"1": 7, "2": 3, "3": 2, "4": 1, "7": 1}
    for gpu, profiles in catalogue.MIG_PROFILES.items():
        for profile, n in profiles.items():
            units = profile.split("g", 1)[0]
            assert n <= fit[units], (gpu, profile)
    for name, devices in hyperpod_chart.MIG_CONFIGS.items():
        assert sum(int(p.split("g", 1)[0]) * n for p, n in devices.items()) <= 7, name


# ------------------------------------------------------------------ quotas by every kind


def test_the_mig_config_synthesizes_quotas_by_slice_vcpu_memory_and_absolute_borrow_limit(synth):
    quotas = {r["Properties"]["ComputeQuotaTarget"]["TeamName"]: r["Properties"] for r in synth("mig").resources("addons", "AWS::SageMaker::ComputeQuota").values()}
    research, inference = quotas["research"]["ComputeQuotaConfig"], quotas["inference"]["ComputeQuotaConfig"]
    assert research["ComputeQuotaResources"] == [{"InstanceType": "ml.p5.48xlarge", "AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 16}}]
    assert research["ResourceSharingConfig"]["AbsoluteBorrowLimits"] == [
        {"InstanceType": "ml.p5.48xlarge", "AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 8}},
        {"InstanceType": "ml.m5.4xlarge", "VCpu": 8, "MemoryInGiB": 32},
    ]
    assert inference["ComputeQuotaResources"] == [
        {"InstanceType": "ml.p5.48xlarge", "VCpu": 64, "MemoryInGiB": 512, "AcceleratorPartition": {"Type": "mig-4g.40gb", "Count": 8}}
    ]


def test_oversubscription_is_counted_per_kind_with_what_sagemaker_fills_in():
    # botocore's ComputeQuotaResourceConfig: accelerators alone bring their share of vCPUs
    # and memory ("ratio-based values"); vCPUs alone bring no accelerators.
    import botocore.session

    docs = botocore.session.get_session().get_service_model("sagemaker").shape_for("ComputeQuotaResourceConfig").members
    assert "ratio" in docs["Accelerators"].documentation and "Accelerators are set to 0" in docs["VCpu"].documentation
    teams = [
        {"name": "a", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]},  # the GPU, so all 32 vCPUs
        {"name": "b", "quotas": [{"instance_type": "ml.g5.8xlarge", "vcpu": 8}]},
    ]
    lines = _problems({"governance": {"teams": teams}, "sample_job": {"team": None}})
    assert any("quotas for ml.g5.8xlarge add up to 40 vCPUs, above the cluster's 32 vCPUs (teams: a, b)" in l for l in lines), lines
    # vCPUs and memory that fit beside each other are no oversubscription.
    teams[0]["quotas"] = [{"instance_type": "ml.g5.8xlarge", "vcpu": 24}]
    settings, _ = validation.load_settings(patched_context("dev", {"governance": {"teams": teams}, "sample_job": {"team": None}}), "dev")
    assert len(settings.governance.teams) == 2


def test_whole_nodes_of_a_partitioned_group_take_its_slices_too():
    patch = json.loads(json.dumps(CAPABILITIES["mig"]))
    patch["governance"]["teams"][1]["quotas"] = [{"instance_type": "ml.p5.48xlarge", "count": 1}]
    lines = _problems(patch)
    assert any("quotas for ml.p5.48xlarge add up to" in l and "slices, above the cluster's 24 mig-1g.10gb slices" in l for l in lines), lines


# ------------------------------------------------------------------ MIG end to end


def test_the_partitioned_group_is_labelled_with_its_chart_configuration_and_advertises_slices(synth):
    s = synth("mig")
    (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    gpu = next(g for g in cluster["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "gpu")
    # HyperPod's GPU partitioning page: the MIG configuration as the group's Kubernetes label.
    assert gpu["KubernetesConfig"]["Labels"] == {"nvidia.com/mig.config": "mixed-3-1g.10gb-1-4g.40gb"}
    assert "mixed-3-1g.10gb-1-4g.40gb" in hyperpod_chart.MIG_CONFIGS
    # The readiness gate waits for the slices, 8 GPUs x (3 + 1), not for whole GPUs.
    (gate,) = [r for r in s.resources("hyperpod", "Custom::HyperPodAcceleratorsReady").values()][:1]
    assert gate["Properties"]["Groups"]["gpu"]["Resources"] == {
        "nvidia.com/mig-1g.10gb": "24", "nvidia.com/mig-4g.40gb": "8", catalogue.EFA_RESOURCE: "32"
    }


def test_the_chart_runs_the_gpu_operator_with_its_regional_images_and_the_plain_plugin_off(synth):
    from stacks.cluster import chart_values

    values = chart_values(synth("mig").settings)
    assert values["nvidia-device-plugin"]["devicePlugin"]["enabled"] is False
    operator = values["gpu-operator"]
    assert operator["enabled"] is True
    registry = "463470961310.dkr.ecr.us-east-1.amazonaws.com"  # charts/gpu-operator/regional-values/values-us-east-1.yaml
    assert operator["gpu-operator"]["migManager"] == {"repository": f"{registry}/mirror-cloud-native"}
    assert {v["repository"].split("/")[0] for v in operator["gpu-operator"].values()} == {registry}
    # Environments without MIG keep the chart's plain device plugin and no operator.
    assert "gpu-operator" not in chart_values(synth("dev").settings)


def test_the_job_asks_for_one_slice_with_one_process_and_no_efa(synth):
    from manifests import job

    obj = job.build(synth("mig").settings, image="example.com/train:1")
    container = obj["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert obj["spec"]["nprocPerNode"] == "1" and "--nproc-per-node=1" in container["command"]
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == 1
    assert not any(k.startswith("nvidia.com/gpu") or k == catalogue.EFA_RESOURCE for k in container["resources"]["limits"])
    assert not any(e["name"].startswith("FI_") for e in container["env"])
    assert obj["metadata"]["namespace"] == "hyperpod-ns-research"


@pytest.mark.parametrize(
    "group, says",
    [
        ({"instance_type": "ml.g5.8xlarge", "mig_profile": "all-1g.10gb"}, "ml.g5.8xlarge (A10G) has no MIG"),
        ({"instance_type": "ml.g6e.12xlarge", "mig_profile": "all-1g.10gb"}, "(L40S) has no MIG"),
        ({"instance_type": "ml.g6.8xlarge", "mig_profile": "all-1g.10gb"}, "(L4) has no MIG"),
        ({"instance_type": "ml.p4d.24xlarge", "mig_profile": "all-1g.10gb"}, "cuts each GPU into 1g.10gb x7, which A100 does not offer"),
        ({"instance_type": "ml.p5.48xlarge", "mig_profile": "all-1g.18gb"}, "1g.18gb x7, which H100 does not offer"),
        ({"instance_type": "ml.p6-b200.48xlarge", "mig_profile": "all-1g.23gb"}, "allowed: none: the chart has no configuration for it"),
    ],
)
def test_mig_is_refused_on_gpus_without_it_and_for_profiles_the_gpu_does_not_offer(group, says):
    lines = _problems({"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                                        {"name": "gpu", "count": 1, **group}]},
                       "governance": {"teams": []}, "sample_job": {"enabled": False}})
    assert any(l.startswith("dev: hyperpod.instance_groups[1].mig_profile:") and says in l for l in lines), lines


# ------------------------------------------------------------------ who may submit where


def _permissions(s) -> dict[str, set[tuple[str, str, str, str]]]:
    """Per principal, (namespace or "*", api group, resource, verb) it may act on, read from the
    templates alone: access entries -> Kubernetes groups -> bindings -> roles' rules."""
    entries = [r["Properties"] for suffix in s.templates for r in s.resources(suffix, "AWS::EKS::AccessEntry").values()]
    objects = [o for suffix in s.templates for o in s.manifests(suffix)]
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o["rules"] for o in objects if o["kind"] in ("Role", "ClusterRole")}
    out: dict[str, set] = {}
    for entry in entries:
        if not isinstance(entry.get("PrincipalArn"), str) or entry.get("AccessPolicies"):
            continue  # the gates' own roles (tokens) and the admins (an EKS policy, not RBAC)
        grants = out.setdefault(entry["PrincipalArn"], set())
        for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
            if not any(sub["kind"] == "Group" and sub["name"] in entry["KubernetesGroups"] for sub in binding["subjects"]):
                continue
            ref = binding["roleRef"]
            rules = roles[(ref["kind"], binding["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"])]
            where = binding["metadata"].get("namespace", "*")
            for rule in rules:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            grants.add((where, group, resource, verb))
    return out


def test_a_teams_people_reach_their_namespace_and_no_other_teams(synth):
    s = synth("mig")
    grants = _permissions(s)
    research, inference = "arn:aws:iam::111111111111:role/research-scientists", "arn:aws:iam::111111111111:role/inference-engineers"
    namespaced = {"pods", "jobs", "hyperpodpytorchjobs", "secrets", "configmaps", "workloads", "pods/log"}
    for arn, own, other in ((research, "research", "inference"), (inference, "inference", "research")):
        mine = grants[arn]
        assert ("hyperpod-ns-" + own, "sagemaker.amazonaws.com", "hyperpodpytorchjobs", "create") in mine
        assert ("hyperpod-ns-" + own, "", "pods/log", "get") in mine
        assert not {g for g in mine if g[0] == "hyperpod-ns-" + other}
        # Nothing namespaced is granted cluster-wide (a ClusterRoleBinding reaches every namespace).
        assert not {g for g in mine if g[0] == "*" and g[2] in namespaced}, sorted(g for g in mine if g[0] == "*")
        # Cluster-wide it reads only its own cluster queue by name (the Role's resourceNames).
    (rules,) = [o["rules"] for o in s.manifests("addons") if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "hyperpod-ns-research-cluster-role"]
    assert {"resources": ["clusterqueues"], "resourceNames": ["hyperpod-ns-research-clusterqueue"]}.items() <= next(r for r in rules if "clusterqueues" in r["resources"]).items()


def test_team_roles_keep_the_charts_names_and_rules_and_add_the_jobs_the_sample_submits():
    # The dependencies chart's team-role-and-bindings subchart (a00b22d17ea9): its group, role
    # names and every namespaced rule except "nodes", which a namespaced Role cannot grant.
    names = naming.team_names("research")
    assert (names.group, names.role, names.cluster_role) == (
        "hyperpod-ns-research-namespace-level-group", "hyperpod-ns-research-namespace-role", "hyperpod-ns-research-cluster-role"
    )
    chart_rules = {("batch", "jobs"), ("", "pods"), ("", "pods/log"), ("kubeflow.org", "pytorchjobs"), ("", "serviceaccounts"),
                   ("", "configmaps"), ("", "secrets"), ("kueue.x-k8s.io", "workloads")}
    ours = {(g, r) for rule in teams.namespace_rules() for g in rule["apiGroups"] for r in rule["resources"]}
    assert chart_rules <= ours
    assert ("sagemaker.amazonaws.com", "hyperpodpytorchjobs") in ours and ("", "nodes") not in ours


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_environments_without_principals_get_no_team_access_entries(synth, env):
    s = synth(env)
    entries = [r for r in s.resources("addons", "AWS::EKS::AccessEntry").values()]
    assert len(entries) == sum(len(t.principals) for t in s.settings.governance.teams)
