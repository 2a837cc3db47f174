"""The memory estimate the config refuses a job with (model_shape.memory_per_gpu), against
what PyTorch really holds for a small model on the CPU: the bytes of its parameters, their
gradients and AdamW's state after a step, and the tensors autograd saves for backward. Then
what config does with it: the 8B refused where it cannot fit, and chosen by default only
where it can."""

from __future__ import annotations

import sys

import pytest
import torch

from infra import catalogue, config
from infra.config.sample_job import job_model
from manifests import job as job_manifest
from tests.conftest import CONTEXT, ROOT, patched_context

sys.path.insert(0, str(ROOT / "training"))  # train.py imports its neighbours as the image does
import model_shape  # noqa: E402
import train  # noqa: E402

VOCAB, SEQ, BATCH = 300, 256, 2


def _tiny_model():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(train.model_config(model_shape.PRESETS["tiny"], VOCAB))
    model.config._attn_implementation = "sdpa"  # what the job runs: no attention matrix kept
    return model


def _estimate(**kwargs):
    return model_shape.memory_per_gpu(model_shape.PRESETS["tiny"], VOCAB, seq_len=SEQ, batch=BATCH, ranks=1, **kwargs)


def _inputs():
    return torch.randint(VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(1))


def test_the_state_estimate_is_the_bytes_of_the_weights_gradients_and_adam_moments_after_a_step():
    model = _tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)  # train.py's
    rows = _inputs()
    train.next_token_loss(model(input_ids=rows[:, :-1]).logits, rows[:, 1:]).backward()
    optimizer.step()
    weights = sum(p.nbytes for p in model.parameters())
    grads = sum(p.grad.nbytes for p in model.parameters())
    moments = sum(s[k].nbytes for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq"))
    steps = sum(s["step"].nbytes for s in optimizer.state.values())  # one scalar per tensor, left out
    assert weights + grads + moments == _estimate()["state"]
    assert steps < 1e-3 * _estimate()["state"]
    # Sharded over ranks, each holds its share.
    shared = model_shape.memory_per_gpu(model_shape.PRESETS["tiny"], VOCAB, seq_len=SEQ, batch=BATCH, ranks=4)
    assert shared["state"] == _estimate()["state"] / 4


def _saved_for_backward(model) -> int:
    """Bytes of the tensors autograd keeps for backward in one forward pass and loss (each
    storage once), less the parameters themselves."""
    seen = {}

    def pack(tensor):
        seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    rows = _inputs()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        train.next_token_loss(model(input_ids=rows[:, :-1]).logits, rows[:, 1:])
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


def test_the_activation_estimate_is_what_autograd_saves_for_backward():
    # fp32 on the CPU (compute_bytes 4). Without checkpointing every layer's tensors stay.
    saved = _saved_for_backward(_tiny_model())
    assert _estimate(compute_bytes=4, checkpointed=False)["activations"] == pytest.approx(saved, rel=0.05)
    # With train.py's full checkpointing each layer keeps only its input; the estimate adds
    # the one layer recomputed in backward, so it is above what the forward keeps.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    model = _tiny_model()
    for i, layer in enumerate(model.model.layers):
        model.model.layers[i] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    checkpointed = _saved_for_backward(model)
    assert checkpointed < _estimate(compute_bytes=4)["activations"] < saved


def _settings(env: str, patch: dict | None = None):
    return config.load_settings(patched_context(env, patch) if patch else CONTEXT, env)[0]


def _refusal(env: str, patch: dict) -> str:
    with pytest.raises(config.ConfigError) as error:
        config.load_settings(patched_context(env, patch), env)
    (line,) = [l for l in error.value.problems if l.startswith(f"{env}: sample_job.model:")]
    return line


def test_the_8b_on_one_a10g_is_refused_with_the_estimate_in_one_line():
    line = _refusal("dev", {"sample_job": {"model": "llama3.1-8b"}})
    parts = model_shape.memory_per_gpu(model_shape.PRESETS["llama3.1-8b"], 128256, seq_len=8192, batch=1, ranks=1)
    assert f"needs about {sum(parts.values()) / 1e9:.0f} GB per GPU at sequence 8192 x batch 1 over 1 rank " in line
    assert f"Adam states {parts['state'] / 1e9:.0f} GB sharded" in line and "ml.g5.8xlarge's A10G's 24 GB" in line
    # 22888 MiB in DescribeInstanceTypes: the 24 GB EC2's pages state.
    assert catalogue.lookup("ml.g5.8xlarge").accelerator_memory_gb == 24 and "\n" not in line


def test_the_8b_is_refused_on_a_slice_with_the_same_estimate():
    mig = {
        "hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                          {"name": "gpu", "instance_type": "ml.p5.48xlarge", "count": 1, "mig_profile": "all-1g.10gb"}]},
        "governance": {"teams": [{"name": "ml-research", "quotas": [{"instance_type": "ml.p5.48xlarge", "count": 1}]}]},
        "sample_job": {"model": "llama3.1-8b", "gpu_partition": "1g.10gb"},
    }
    line = _refusal("dev", mig)
    assert "over 1 rank " in line and "a 1g.10gb slice's 10 GB" in line


def test_the_default_model_follows_the_group():
    # dev names tiny; unset, its one A10G still gets tiny, and prod's 16 H100 the 8B.
    assert job_model(_settings("dev", {"sample_job": {"model": None}})) == "tiny"
    prod = _settings("prod", {"sample_job": {"model": None}})
    assert job_model(prod) == "llama3.1-8b"
    command = job_manifest.build(prod, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    assert "--model=llama3.1-8b" in command and "--seq-len=8192" in command and f"--batch-size={model_shape.JOB_BATCH}" in command
    # One p4d (8 A100 of 40 GB): the 8B fits, as the job's full activation checkpointing intends.
    p4d = {"hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.8xlarge", "count": 2},
                                            {"name": "gpu", "instance_type": "ml.p4d.24xlarge", "count": 1}]},
           "governance": {"teams": []}, "sample_job": {"model": None, "nodes": 1, "team": None, "priority": None}}
    assert job_model(_settings("prod", p4d)) == "llama3.1-8b"
