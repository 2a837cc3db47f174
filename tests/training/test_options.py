"""train.py's options and recipe: each performance option runs and gives the plain run's loss,
the GPU smoke command uses only options these tests run, and the 8B job trains on torchtitan's
published Llama 3 8B recipe."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.training.runs import TRAIN, job_train_args, losses_of, plain_command, train_in_process, train_module


PERFORMANCE_FLAGS = {
    "compile": ["--compile"],
    "selective-ac": ["--activation-checkpointing=selective"],
    "no-ac": ["--activation-checkpointing=none"],
    "fused-adamw": ["--fused-optimizer"],
    "fsdp-units": ["--fsdp-units=tuned"],
}


def test_gpu_smoke_runs_the_8b_fast_path_with_options_train_py_defines_and_the_cpu_tests_run():
    """make gpu-smoke runs only where a GPU is lent: its train.py command must still parse,
    give the 8B shape's fast path, and use only performance options this module runs."""
    from tests.bench import gpu_smoke

    cmd = gpu_smoke.train_command(layers=4, steps=40)
    args = train_module().parse_args(cmd[cmd.index(str(TRAIN)) + 1 :])  # exits on an option train.py lacks
    assert (args.model, args.layers, args.seq_len, args.batch_size, args.synthetic_data, args.bf16) == ("llama3.1-8b", 4, 8192, 1, True, "on")
    assert args.checkpoint_dir is None  # it measures training, not saves (tests/bench/bench_checkpoint.py does)
    assert args.compile and args.fused_optimizer and (args.fsdp_units, args.activation_checkpointing) == ("tuned", "selective")
    tested = {flag for flags in PERFORMANCE_FLAGS.values() for flag in flags}
    assert {a for a in cmd if a.split("=")[0] in {t.split("=")[0] for t in tested}} <= tested


def _run_in_process(work: Path, *args: str) -> dict[int, float]:
    code, out = train_in_process(work, *args)
    assert code == 0, out[-2000:]
    return losses_of(out)


@pytest.fixture(scope="module")
def plain_losses(workdir):
    return _run_in_process(workdir, "--max-steps=4", "--log-interval=1")


@pytest.mark.parametrize("flag", sorted(PERFORMANCE_FLAGS))
def test_each_performance_option_runs_and_gives_the_plain_loss(workdir, plain_losses, flag):
    import torch._inductor.config as inductor

    # --compile on the CPU: inductor writes C++ kernels (for the job's GPUs it writes Triton
    # ones), scalar here: the vectorized ones' headers made a compile from an empty inductor
    # cache, as a fresh CI machine has, 32 s instead of 18 (16 kernels through g++).
    with inductor.patch({"cpp.vec_isa_ok": False}):
        losses = _run_in_process(workdir, "--max-steps=4", "--log-interval=1", *PERFORMANCE_FLAGS[flag])
    assert sorted(losses) == [1, 2, 3, 4]
    for step, value in plain_losses.items():
        assert losses[step] == pytest.approx(value, abs=1e-3), step


def test_the_8b_job_trains_on_torchtitans_llama3_8b_recipe():
    # torchtitan's Llama 3 8B preset (tests/fixtures/torchtitan_llama3_8b.json, with its source):
    # the prod job's 1,000 steps warm up over its 200, at its learning rate, batch, sequence and
    # gradient clipping, as train.py reads the rendered command.
    recipe = json.loads((ROOT / "tests" / "fixtures" / "torchtitan_llama3_8b.json").read_text())
    args = job_train_args()
    assert args.model == "llama3.1-8b" and args.max_steps == recipe["training"]["steps"]
    assert args.warmup_steps == recipe["lr_scheduler"]["warmup_steps"]
    assert args.lr == recipe["optimizer"]["lr"] and args.grad_clip == recipe["training"]["max_norm"]
    assert (args.batch_size, args.seq_len) == (recipe["training"]["batch_size"], recipe["training"]["seq_len"])
    # The project takes its learning rate to be for the preset note's global batch, 64 GPUs x 1 x
    # 8192 = 524,288 tokens (torchtitan scales nothing): the job's other batches scale it by the
    # square root of the ratio (train.lr_scale), prod's 16 GPUs to half the recipe's 3e-4.
    recipe_tokens = recipe["preset_gpus"] * recipe["training"]["batch_size"] * recipe["training"]["seq_len"]
    assert args.lr_batch_tokens == recipe_tokens == 524_288
    prod_tokens = 16 * args.batch_size * args.seq_len  # prod's two p5 nodes
    assert args.lr * train_module().lr_scale(prod_tokens, args.lr_batch_tokens) == pytest.approx(1.5e-4)
    # Another step count keeps torchtitan's share; the learning rate peaks at the warm-up's end.
    from training import model_shape

    assert model_shape.job_warmup_steps("llama3.1-8b", 3000) == 600
    factor = train_module().lr_schedule(args)
    assert factor(args.warmup_steps - 1) == 1.0 and factor(0) == 1 / args.warmup_steps


def test_document_masking_runs_off_by_default_and_changes_what_a_token_sees(workdir, plain_losses):
    # Off by default: a mask rules out SDPA's flash kernel (llama_model.logits_of), so it costs
    # throughput; on, each token sees only its own document (its exactness: test_model.py).
    assert not train_module().parse_args([]).document_masking and not job_train_args().document_masking
    masked = _run_in_process(workdir, "--max-steps=4", "--log-interval=1", "--document-masking")
    assert sorted(masked) == [1, 2, 3, 4]
    assert masked[1] != pytest.approx(plain_losses[1], abs=1e-4)


def test_the_learning_rate_is_given_for_a_global_batch_and_scaled_by_the_square_root_of_another(workdir):
    # --lr at --lr-batch-tokens (the recipe's batch); a run of a quarter of that batch trains at half
    # the rate (AdamW's square-root rule, Malladi et al., NeurIPS 2022), which it says at the start.
    code, out = train_in_process(workdir, "--max-steps=2", "--log-interval=1", "--lr-batch-tokens=512")
    assert code == 0, out[-2000:]
    assert "learning rate 1.500e-03 at a global batch of 128 tokens: 3.000e-03 at 512 tokens x sqrt(128/512)" in out.splitlines()
    args = train_module().parse_args(["--lr=3e-3", "--warmup-steps=3"])
    assert "step=1 loss=" in out and f" lr={3e-3 * 0.5 * train_module().lr_schedule(args)(0):.3e} " in out


def test_a_checkpoint_without_a_recorded_global_batch_is_assumed_said_in_one_line_and_ramped(workdir, tmp_path):
    # A manifest of train.py before it recorded the global batch (step and files alone): that run
    # trained at --lr unscaled, so a resume that now scales it ramps there instead of jumping (the
    # 8B's 3e-4 -> 1.5e-4 on prod's 16 GPUs in one step), and says what it assumed.
    ckpt = tmp_path / "ckpt"
    code, out = train_in_process(workdir, "--max-steps=4", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=2")
    assert code == 0, out[-2000:]
    shutil.rmtree(ckpt / "step_00000004")
    manifest = ckpt / "step_00000002" / "_COMPLETE.json"
    manifest.write_text(json.dumps({k: v for k, v in json.loads(manifest.read_text()).items() if k in ("step", "files")}))
    resume = ("--max-steps=6", "--log-interval=1", f"--checkpoint-dir={ckpt}", "--lr-batch-tokens=512", "--lr-ramp-steps=2")
    code, out = train_in_process(workdir, *resume)
    assert code == 0, out[-2000:]
    assert (f"checkpoint {ckpt / 'step_00000002'} records no global batch (an earlier train.py's), so its run's learning rate is "
            "assumed: --lr as given, unscaled, as train.py then trained, peak 3.000e-03; this global batch of 128 tokens trains at "
            "1.500e-03 (3.000e-03 at 512 tokens x sqrt(128/512)), ramped over steps 3-4") in out.splitlines()
    train = train_module()
    args = train.parse_args(plain_command(workdir, *resume)[2:])
    lrs = {int(m[0]): float(m[1]) for m in re.findall(r"^step=(\d+) loss=\S+ lr=(\S+) ", out, flags=re.M)}
    ramp = {3: 0.75, 4: 0.5, 5: 0.5, 6: 0.5}
    assert lrs == {step: pytest.approx(args.lr * ramp[step] * train.lr_schedule(args)(step - 1), rel=1e-3) for step in ramp}
    # A manifest of the train.py that scaled linearly by world size records its worlds: that rate.
    _, scale, ramp, line = train.lr_plan(args, {"world": 2, "recipe_world": 1}, 128, 2, "ck")
    assert ramp == {"from": 2.0, "to": 0.5, "at": 2, "steps": 2} and scale == 0.5
    assert "assumed: the linear rule train.py then applied, x2/1 ranks, peak 6.000e-03; " in line
