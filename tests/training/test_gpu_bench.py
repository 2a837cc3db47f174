"""make gpu-bench, on the CPU: which share of the 8B it runs on a machine's GPUs (the memory
projection the config admits the job with, by the catalogue's GPU memory), the torchrun command it
builds (train.py's own parser reads it, with the job's production flags) and what it reads back
from train.py's lines. It runs only where a GPU is lent (docs/measured.md)."""

from __future__ import annotations

import json

import pytest

from infra import catalogue, validation
from infra.checks.sample_job import memory_fit
from manifests import job as job_manifest
from tests.bench import gpu_bench
from tests.conftest import ROOT, patched_context
from tests.training.runs import TRAIN, job_train_args, train_module
from training import log_format, model_shape

MIB = 2**20


def _gpu(instance_type: str) -> float:
    """One GPU's memory as PyTorch reports it (what gpu_bench.main plans with), not the nominal."""
    spec = catalogue.figures(instance_type)
    return model_shape.torch_memory_mib(spec.accelerator, spec.accelerator_memory_mib)[0] * MIB


def test_a_whole_node_runs_the_whole_8b_where_the_config_admits_it():
    # One p5 (8 H100): the whole model. One p4d (8 A100 40 GB): the config finds the 8B tight there
    # (tests/training/test_memory.py), so the bench runs the most layers that fit, and says so.
    p5 = gpu_bench.plan(8, _gpu("ml.p5.48xlarge"))
    assert p5.whole and p5.layers == 32 and "the whole 8B (32 layers) over 8 GPUs" in p5.words
    p4d = gpu_bench.plan(8, _gpu("ml.p4d.24xlarge"))
    p4d_config = {"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.8xlarge", "count": 2},
                                                   {"name": "gpu", "instance_type": "ml.p4d.24xlarge", "count": 1}]},
                  "governance": {"teams": []}, "sample_job": {"model": "llama3.1-8b", "nodes": 1, "team": None, "priority": None}}
    settings, _ = validation.load_settings(patched_context("prod", p4d_config), "prod")
    assert memory_fit(settings, "llama3.1-8b").verdict == "tight" and not p4d.whole
    # 29 layers fit the 39.6 GiB PyTorch sees of an A100 40 GB; its nominal 40.0 would have taken 30.
    assert f"29 of the 8B's 32 layers (the most that fit: the whole model does not)" in p4d.words
    assert gpu_bench.plan(8, 40960 * MIB).layers == 30


@pytest.mark.parametrize("gpus, instance_type", [(1, "ml.p5.48xlarge"), (8, "ml.p4d.24xlarge"), (1, "ml.p5en.48xlarge")])
def test_otherwise_it_runs_the_most_layers_the_projection_fits(gpus, instance_type):
    memory = _gpu(instance_type)
    chosen = gpu_bench.plan(gpus, memory)
    shape = model_shape.PRESETS["llama3.1-8b"]

    def projected(layers):
        preset = model_shape.Preset(**{**shape.__dict__, "layers": layers})
        return model_shape.projected_per_gpu(model_shape.memory_per_gpu(preset, preset.vocab, seq_len=8192, batch=1, ranks=gpus), gpus)

    assert chosen.projected == projected(chosen.layers) <= model_shape.FIT_SHARE * memory < projected(chosen.layers + 1)


def test_one_h200_fits_more_layers_than_the_recorded_h200_run_measured():
    # tests/fixtures/gpu_memory_h200.json: 8 layers of the 8B shape held 59 GiB reserved on one H200;
    # the plan for that GPU runs more, and the measurement is within its projection for 8 layers.
    record = json.loads((ROOT / "tests" / "fixtures" / "gpu_memory_h200.json").read_text())
    row = next(r for r in record["rows"] if r["layers"] == 8)
    chosen = gpu_bench.plan(1, row["gpu_total_gib"] * 2**30)
    assert chosen.layers > 8
    shape = model_shape.PRESETS["llama3.1-8b"]
    eight = model_shape.Preset(**{**shape.__dict__, "layers": 8})
    parts = model_shape.memory_per_gpu(eight, eight.vocab, seq_len=row["seq_len"], batch=1, ranks=1)
    assert row["peak_reserved_gib"] * 2**30 <= model_shape.projected_per_gpu(parts, 1)


@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_the_command_is_torchrun_over_every_gpu_with_the_jobs_production_flags(gpus):
    chosen = gpu_bench.plan(gpus, _gpu("ml.p5.48xlarge"))
    cmd = gpu_bench.train_command(chosen, steps=40)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"] and f"--nproc-per-node={gpus}" in cmd
    args = train_module().parse_args(cmd[cmd.index(str(TRAIN)) + 1 :])  # exits on an option train.py lacks
    job = job_train_args()
    assert (args.model, args.seq_len, args.batch_size, args.activation_checkpointing) == (job.model, job.seq_len, job.batch_size, job.activation_checkpointing)
    assert (args.compile, args.fused_optimizer, args.fsdp_units) == (job.compile, job.fused_optimizer, job.fsdp_units)
    assert set(gpu_bench.PRODUCTION_FLAGS) == set(job_manifest.SPEED_FLAGS)
    assert args.synthetic_data and args.bf16 == "on" and args.checkpoint_dir is None
    assert args.layers == (None if chosen.whole else chosen.layers)


def test_it_reads_tokens_per_second_mfu_and_each_ranks_peaks_from_train_py_lines():
    chosen = gpu_bench.plan(8, _gpu("ml.p5.48xlarge"))
    lines = [log_format.LOSS_LINE.format(step=s, loss=3.0, lr=3e-4, tps=40000.0 + s) + f" mfu={0.3 + s / 1000:.3f}" for s in range(1, 41)]
    lines += [log_format.MEMORY_LINE.format(rank=r, allocated=30.0 + r, reserved=35.0 + r) for r in range(8)]
    line = gpu_bench.summary("\n".join(lines), chosen, warmup=15, device="NVIDIA H100 80GB HBM3")
    assert "the whole 8B (32 layers) over 8 GPUs" in line and "median 40028 tokens/s (5004 per GPU), MFU 0.328" in line
    assert "rank 0 30.0 allocated, 35.0 reserved" in line and "rank 7 37.0 allocated, 42.0 reserved" in line


def test_before_the_run_it_refuses_an_unlisted_gpu_or_mixed_gpus_in_one_line():
    # MFU needs the GPU's peak (model_shape.PEAK_TFLOPS); without it the old bench found out only
    # after the whole run (no mfu= in train.py's lines).
    assert gpu_bench.preflight(["NVIDIA H100 80GB HBM3"] * 8, None) is None
    assert gpu_bench.preflight(["NVIDIA H100 PCIe"] * 2, None) is None
    line = gpu_bench.preflight(["Tesla T4"], None)
    assert line.startswith("gpu-bench: Tesla T4 has no dense bf16 peak in training/model_shape.py PEAK_TFLOPS") and "--peak-tflops" in line
    assert gpu_bench.preflight(["Tesla T4"], 65.0) is None
    assert gpu_bench.preflight(["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"], None) == (
        "gpu-bench: the GPUs are not one model (NVIDIA H100 80GB HBM3, NVIDIA H100 PCIe); run it on a machine of one")
    chosen = gpu_bench.plan(1, _gpu("ml.g4dn.xlarge"))
    assert chosen is None or "--peak-tflops=65.0" in gpu_bench.train_command(chosen, 40, peak_tflops=65.0)


def test_an_unlisted_gpu_stops_main_before_torchrun(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA RTX 9999")

    def never(*args, **kwargs):
        raise AssertionError("torchrun started")

    monkeypatch.setattr(gpu_bench, "run_torchrun", never)
    assert gpu_bench.main([]) == 1
    assert capsys.readouterr().err.startswith("gpu-bench: NVIDIA RTX 9999 has no dense bf16 peak")
    # A listed GPU goes on to torchrun, under the time limit (--timeout, TIMEOUT_S by default).
    import types

    runs = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 NVL")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: types.SimpleNamespace(name="NVIDIA H100 NVL", total_memory=95830 * MIB))
    monkeypatch.setattr(gpu_bench, "run_torchrun", lambda command, env, timeout_s: runs.append((command, timeout_s)) or (1, "", "failed"))
    assert gpu_bench.main([]) == 1 and gpu_bench.main(["--timeout", "60"]) == 1
    assert [t for _, t in runs] == [gpu_bench.TIMEOUT_S, 60] and f"--nproc-per-node=8" in runs[0][0]


def test_the_torchrun_past_its_timeout_is_stopped_with_its_workers(tmp_path, monkeypatch):
    import sys
    import time
    from pathlib import Path

    # A launcher whose worker (its child, as torchrun's are) would outlive it unless the group is stopped.
    launcher = ("import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                f"open({str(tmp_path / 'worker')!r}, 'w').write(str(w.pid)); print('started', flush=True); time.sleep(120)")
    monkeypatch.setattr(gpu_bench, "STOP_GRACE_S", 5)
    started = time.monotonic()
    code, out, err = gpu_bench.run_torchrun([sys.executable, "-c", launcher], dict(__import__("os").environ), timeout_s=2)
    assert code == 124 and time.monotonic() - started < 15
    assert "started" in out and "torchrun did not finish in 2 s (--timeout); its process group was stopped" in err
    worker = Path(f"/proc/{(tmp_path / 'worker').read_text()}/status")
    time.sleep(0.2)
    assert not worker.exists() or "\nState:\tZ" in worker.read_text()  # gone (or a zombie no one has reaped yet)
