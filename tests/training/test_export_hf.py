"""training/export_hf.py: the job's sharded checkpoint (train.py's layout: {"model", "optim"} by
torch.distributed.checkpoint, a manifest once complete) becomes safetensors a server loads, with the
same weights: the model loaded back by transformers gives the trained model's logits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "training"))  # export_hf imports its neighbours as the image does


def _checkpoint(base: Path, step: int):
    import torch.distributed.checkpoint as dcp
    from checkpoints import MANIFEST
    from llama_model import model_config
    from model_shape import PRESETS
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    config = model_config(PRESETS["tiny"], 300)
    config._attn_implementation = "sdpa"
    trained = LlamaForCausalLM(config)
    optim = torch.optim.AdamW(trained.parameters())
    ckpt = base / f"step_{step}"
    dcp.save({"model": trained.state_dict(), "optim": optim.state_dict()}, storage_writer=dcp.FileSystemWriter(str(ckpt)))
    files = {p.name: p.stat().st_size for p in ckpt.iterdir()}
    (ckpt / MANIFEST).write_text(json.dumps({"step": step, "files": files}))
    return trained


def test_the_newest_checkpoint_exported_serves_the_trained_weights(tmp_path):
    import export_hf
    from transformers import LlamaForCausalLM

    _checkpoint(tmp_path / "ckpts", 1)
    trained = _checkpoint(tmp_path / "ckpts", 2)
    (tmp_path / "ckpts" / "step_3").mkdir()  # begun, never completed: not the newest
    ckpt = export_hf.newest(str(tmp_path / "ckpts"))
    assert ckpt.endswith("step_2")
    export_hf.export(ckpt, "tiny", str(tmp_path / "serving"), dtype=torch.float32)
    assert (tmp_path / "serving" / "model.safetensors").exists()
    served = LlamaForCausalLM.from_pretrained(tmp_path / "serving")
    tokens = torch.randint(0, 300, (1, 16))
    with torch.no_grad():
        assert torch.allclose(served(tokens).logits, trained(tokens).logits, atol=1e-5)
