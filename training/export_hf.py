"""The job's newest checkpoint as a model a server loads: Hugging Face safetensors.

train.py saves sharded torch.distributed.checkpoint directories (weights and optimizer state, one
file per rank), which no model server reads. This loads the weights alone into the model train.py
builds (its preset's transformers LlamaConfig, the embedding sized as saved) in one process, and
writes `save_pretrained` safetensors and the tokenizer where the endpoint loads from
(manifests/endpoint.py; `render-endpoint` prints the two places). Run it from a checkout where the
checkpoints are reachable, with training/requirements.txt installed (torch, transformers), on a host
with the model's memory in bf16 (about 16 GB for the 8B):

    python training/export_hf.py --checkpoints s3://BUCKET/JOB/checkpoints --model llama3.1-8b \
        --tokenizer meta-llama/Llama-3.1-8B --out s3://BUCKET/JOB/serving

It imports its neighbours as train.py does, but is no part of the job: the training image's asset
excludes it (stacks/sample_job.py), so its content hash, and every environment's job, stay as they were.
"""

from __future__ import annotations

import argparse
import tempfile

import torch

EMBEDDING = "model.embed_tokens.weight"


def newest(base: str) -> str:
    """The newest complete checkpoint under `base` (train.py's step_<n> folders with a manifest)."""
    from checkpoints import complete_checkpoints

    found = complete_checkpoints(base)
    if not found:
        raise SystemExit(f"no complete checkpoint under {base}")
    return found[0][1]


def export(ckpt: str, model: str, out_dir: str, *, dtype=torch.bfloat16):
    """Load the weights of the checkpoint at `ckpt` into the preset's model and save them to the
    local folder `out_dir` as safetensors; returns the model."""
    import torch.distributed.checkpoint as dcp
    from transformers import LlamaForCausalLM

    from checkpoints import _writer_reader
    from llama_model import model_config
    from model_shape import PRESETS

    _, reader = _writer_reader(ckpt)
    saved = reader.read_metadata().state_dict_metadata
    vocab = saved[f"model.{EMBEDDING}"].size[0]  # the tokenizer the job trained with
    config = model_config(PRESETS[model], vocab)
    config._attn_implementation = "sdpa"  # the server's own attention, not train.py's registered one
    net = LlamaForCausalLM(config)
    state = {"model": net.state_dict()}
    # Only the weights: DCP reads the keys asked for and leaves the optimizer state (no process group: one process).
    dcp.load(state, storage_reader=reader)
    net.load_state_dict(state["model"])
    net.config.use_cache = True
    net.to(dtype).save_pretrained(out_dir, safe_serialization=True)
    return net


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", required=True, help="the job's checkpoint folder (s3://... or a path)")
    parser.add_argument("--model", required=True, help="the job's preset (sample_job.model)")
    parser.add_argument("--tokenizer", required=True, help="the job's tokenizer (sample_job.tokenizer)")
    parser.add_argument("--out", required=True, help="where the endpoint loads from (s3://... or a path)")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from checkpoints import _fs

    ckpt = newest(args.checkpoints)
    with tempfile.TemporaryDirectory() as local:
        export(ckpt, args.model, local)
        AutoTokenizer.from_pretrained(args.tokenizer).save_pretrained(local)
        _fs(args.out).put(f"{local}/", args.out.rstrip("/") + "/", recursive=True)
    print(f"{ckpt} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
