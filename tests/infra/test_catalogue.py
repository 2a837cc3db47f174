"""The instance catalogue against what SageMaker takes and what EC2 says of each type: the
types are botocore's sagemaker `ClusterInstanceType` enum, the figures EC2's DescribeInstanceTypes
output as moto ships it, both read here from .venv; every type validates, and one whose figures
no source states is accepted with a warning naming them, never refused and never counted as 0."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from infra import catalogue, config, validation
from tests.conftest import patched_context


def test_the_catalogue_is_the_enum_with_ec2s_figures_as_read_from_botocore_and_moto():
    enum, ec2, _ = catalogue.sources()
    data = json.loads(catalogue.DATA.read_text())
    assert list(data["types"]) == enum, "python -m infra.catalogue refresh"
    assert data["types"] == catalogue.rows(enum, ec2)
    # read_from says which releases wrote the file; a later release that gives the same enum and
    # figures (a fresh install took moto 5.2.6 where the file says 5.2.5) leaves it right.
    assert data["read_from"].split(", ")[0].startswith("botocore ") and data["read"] == catalogue.READ
    assert set(catalogue.CATALOGUE) == set(enum)
    # The one type moto's data lacks has a page of its own; the rest are EC2's figures.
    assert [n for n, row in data["types"].items() if row is None] == list(catalogue.BEYOND_THE_DATA)


def test_figures_match_what_the_reference_templates_and_facts_rely_on():
    # FACTS, "Instance facts for the defaults": p5 8 H100 and 32 EFA, p4d 8 A100 and 4 EFA, g5.8xlarge 1 A10G and 1 EFA.
    p5, p4d, g5 = (catalogue.lookup(n) for n in ("ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.g5.8xlarge"))
    assert (p5.accelerators, p5.accelerator, p5.efa_interfaces) == (8, "H100", 32)
    assert (p4d.accelerators, p4d.accelerator, p4d.efa_interfaces) == (8, "A100", 4)
    assert (g5.accelerators, g5.accelerator, g5.efa_interfaces, g5.vcpus, g5.memory_gib) == (1, "A10G", 1, 32, 128)
    # DescribeInstanceTypes names both A100s "A100"; NVIDIA's MIG tables tell them apart by memory.
    assert catalogue.lookup("ml.p4de.24xlarge").mig_profiles == catalogue.MIG_PROFILES["A100-80GB"]
    assert catalogue.lookup("ml.trn2.48xlarge").accelerator_resource == catalogue.NEURON
    assert not catalogue.lookup("ml.g5.xlarge").efa_interfaces  # the small g5s have no EFA


def test_gpu_memory_is_the_mib_ec2_states_and_a_slice_its_eighths_of_it():
    # DescribeInstanceTypes' GpuInfo MemoryInfo SizeInMiB, as moto ships it, for every GPU type.
    _, ec2, _ = catalogue.sources()
    for name, spec in catalogue.CATALOGUE.items():
        gpus = (ec2.get(name.removeprefix("ml.")) or {}).get("GpuInfo", {}).get("Gpus")
        if gpus:
            assert spec.accelerator_memory_mib == gpus[0]["MemoryInfo"]["SizeInMiB"], name
    # NVIDIA's MIG user guide, "Getting Started with MIG", on an A100-SXM4-40GB: `nvidia-smi mig
    # -lgipp` places each profile on this many of the GPU's eight memory slices, and `-lgip` shows
    # what the driver leaves of each (GiB): at most 5% under the share, which FIT_SHARE's margin covers.
    lgipp = {"1g.5gb": 1, "1g.10gb": 2, "2g.10gb": 2, "3g.20gb": 4, "4g.20gb": 4, "7g.40gb": 8}
    lgip = {"1g.5gb": 4.75, "1g.10gb": 9.62, "2g.10gb": 9.62, "3g.20gb": 19.50, "4g.20gb": 19.50, "7g.40gb": 39.25}
    p4d = catalogue.lookup("ml.p4d.24xlarge")
    assert {p: catalogue.mig_memory_eighths("A100", p) for p in p4d.mig_profiles} == lgipp
    for profile, gib in lgip.items():
        share = p4d.mig_memory_mib(profile) / 1024
        assert 0.95 * share <= gib < share, profile
    # Every GPU's profiles hold 1, 2, 4 or all 8 eighths (the guide's "Fraction of Memory"), and
    # as many of one profile as a GPU holds fit its eight.
    for gpu, profiles in catalogue.MIG_PROFILES.items():
        assert max(catalogue.mig_memory_eighths(gpu, p) for p in profiles) == 8, gpu
        for profile, n in profiles.items():
            eighths = catalogue.mig_memory_eighths(gpu, profile)
            assert eighths in (1, 2, 4, 8) and n * eighths <= 8, (gpu, profile)
    assert catalogue.lookup("ml.p5.48xlarge").mig_memory_mib("1g.10gb") == 81920 // 8
    assert catalogue.lookup("ml.p5.48xlarge").mig_memory_mib("1g.5gb") is None  # an A100 profile


def test_every_type_sagemaker_takes_validates_and_only_missing_figures_warn():
    enum, _, _ = catalogue.sources()
    refused, warned = {}, {}
    for name in enum:
        patch = {"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                                  {"name": "probe", "instance_type": name, "count": 1}]},
                 "governance": {"teams": []}, "sample_job": {"enabled": False}}
        try:
            _, warnings = validation.load_settings(patched_context("dev", patch), "dev")
        except config.ConfigError as err:
            refused[name] = err.problems
            continue
        warned[name] = [w for w in warnings if "instance_groups[1]" in w]
    assert refused == {}
    assert {n: w for n, w in warned.items() if w} == {n: w for n, w in warned.items() if catalogue.lookup(n).unknown}


def test_a_name_sagemaker_does_not_take_is_refused_with_the_nearest_it_does():
    patch = {"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                              {"name": "gpu", "instance_type": "ml.g6e.2xlarg", "count": 1}]}}
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", patch), "dev")
    (line,) = [p for p in err.value.problems if "instance_groups[1].instance_type" in p]
    assert "ClusterInstanceType" in line and "did you mean ml.g6e.2xlarge" in line


@pytest.fixture
def figures_unknown(monkeypatch):
    """ml.g6e.2xlarge as a type HyperPod takes whose figures no source states (as a type the
    enum gains before EC2's data has it)."""
    types = dict(catalogue.CATALOGUE)
    types["ml.g6e.2xlarge"] = catalogue._build("ml.g6e.2xlarge", None, "")
    monkeypatch.setattr(catalogue, "CATALOGUE", MappingProxyType(types))
    return "ml.g6e.2xlarge"


def test_a_type_without_figures_is_accepted_with_a_warning_and_counted_where_it_can_be(figures_unknown):
    from cli import preflight

    patch = {"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                              {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1},
                                              {"name": "new", "instance_type": figures_unknown, "count": 3}]},
             "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]},
                                      {"name": "vision", "quotas": [{"instance_type": figures_unknown, "count": 2}]},
                                      {"name": "speech", "quotas": [{"instance_type": figures_unknown, "vcpu": 8}]}]}}
    settings, warnings = validation.load_settings(patched_context("dev", patch), "dev")
    (line,) = [w for w in warnings if "instance_groups[2].instance_type" in w]
    assert "vCPUs, memory, accelerators, EFA interfaces" in line and "cannot be checked" in line
    assert any("governance.teams[2].quotas[0].vcpu" in w and "cannot be checked" in w for w in warnings)
    # Instances need no figure: quotas by count and the account's quota count all three nodes.
    assert settings.capacity()[figures_unknown] == 3 and settings.resource_capacity()[figures_unknown]["vcpu"] is None
    assert ("ml.g6e.2xlarge for cluster usage", 3) in [(preflight.quota_name(t), n) for t, n in settings.capacity().items()]
    # A count beyond the groups is still refused; what needs its GPUs says so in one line.
    too_many = config.deep_merge(patch, {"governance": {"teams": [patch["governance"]["teams"][0],
                                                                  {"name": "vision", "quotas": [{"instance_type": figures_unknown, "count": 4}]}]}})
    with pytest.raises(config.ConfigError, match="count: 4 is more than the cluster's 3 instances of ml.g6e.2xlarge"):
        validation.load_settings(patched_context("dev", too_many), "dev")
    job = config.deep_merge(patch, {"sample_job": {"instance_group": "new"}})
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", job), "dev")
    assert any(p.startswith("dev: sample_job.instance_group: 'new' is ml.g6e.2xlarge, whose vCPUs") for p in err.value.problems)


def test_each_types_architecture_is_what_ec2_describes_and_gb200_hosts_are_arm():
    # EC2 DescribeInstanceTypes' ProcessorInfo.SupportedArchitectures (moto's copy), read here; GB200,
    # which that data lacks, runs NVIDIA Grace (Arm) CPUs: the image mirror copies whole indexes for it.
    _, ec2, _ = catalogue.sources()
    for name, spec in catalogue.CATALOGUE.items():
        described = ec2.get(name.removeprefix("ml."))
        if described is not None:
            assert spec.architecture == ("arm64" if described["ProcessorInfo"]["SupportedArchitectures"] == ["arm64"] else "x86_64"), name
    assert catalogue.lookup("ml.p6e-gb200.36xlarge").architecture == "arm64"
    assert catalogue.lookup("ml.p5.48xlarge").architecture == "x86_64"
