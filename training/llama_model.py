"""The model: a preset's transformers LlamaConfig, built on the meta device, sharded with
FSDP2 (each decoder layer a unit, with activation checkpointing and compiled layers where
asked), materialised on the device; its logits and the next-token loss.

Beside train.py in the image, which imports it as a sibling (`from llama_model import ...`).
"""

from __future__ import annotations

import torch

from model_shape import Preset


# The attention train.py runs: transformers' SDPA attention, registered under a name whose mask
# function makes no mask. With no mask SDPA is told is_causal (its flash kernel), and nothing about
# a mask is checked on the device: transformers 4.53's own SDPA mask asks `padding_mask.all()` of
# an all-ones mask on every forward (masking_utils._ignore_causal_mask_sdpa), a device-to-host
# sync, and without one it builds a (batch, 1, seq, seq) mask from the position ids, which rules
# the flash kernel out. Document masking passes its own 4D mask, which transformers takes as it is.
CAUSAL_ATTENTION = "sdpa_causal"


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CAUSAL_ATTENTION, sdpa_attention_forward)
    AttentionMaskInterface.register(CAUSAL_ATTENTION, lambda *args, **kwargs: None)


def model_config(preset: Preset, vocab_size: int):
    """The transformers LlamaConfig of `preset`, its embedding sized to the tokenizer, on the
    causal SDPA attention (CAUSAL_ATTENTION)."""
    from transformers import LlamaConfig

    _register_attention()
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        max_position_embeddings=preset.max_positions,
        rope_theta=preset.rope_theta,
        rope_scaling=dict(preset.rope_scaling) if preset.rope_scaling else None,
        rms_norm_eps=preset.rms_norm_eps,
        tie_word_embeddings=False,
        use_cache=False,
    )
    config._attn_implementation = CAUSAL_ATTENTION
    return config


def build_model(config):
    """On the meta device: no memory and no time, whatever the size; shard, then materialise."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(config)


def logits_of(model, inputs, segments=None):
    """The model's logits for `inputs`, causal over the whole row (SDPA's is_causal, no mask made:
    CAUSAL_ATTENTION). With `segments` (document masking: data_stream.document_segments, made on
    the CPU), each position attends only to its own document's earlier positions, and its RoPE
    position counts from its document's start: each document as if alone."""
    if segments is None:
        return model(input_ids=inputs).logits
    documents, positions = segments
    causal = torch.ones(inputs.shape[1], inputs.shape[1], dtype=torch.bool, device=inputs.device).tril()
    mask = (documents[:, :, None] == documents[:, None, :]) & causal
    return model(input_ids=inputs, attention_mask=mask[:, None], position_ids=positions).logits


def next_token_loss(logits, targets):
    """Mean cross-entropy of each position's logits against its next token. `targets` are
    already the next tokens (batches() shifts them), so nothing is shifted here."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def shard(model, device, *, bf16: bool, activation_checkpointing: str, compile_layers: bool, units: str):
    """FSDP2 over the meta model: each decoder layer a unit (tuned: the embedding and the
    head too), then the root."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    layers = model.model.layers
    if activation_checkpointing != "none":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

        every = 2 if activation_checkpointing == "selective" else 1
        for i, layer in enumerate(layers):
            if i % every == 0:
                layers[i] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    if compile_layers:
        for layer in layers:
            layer.compile()  # in place: parameter names, and so checkpoints, stay the same
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        # The last layer's backward comes first: resharding it after forward would only regather it.
        fully_shard(layer, mp_policy=mp, reshard_after_forward=not (units == "tuned" and i == last))
    if units == "tuned":
        fully_shard(model.model.embed_tokens, mp_policy=mp)
        fully_shard(model.lm_head, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mp_policy=mp)
    return model


def materialise(model, device, seed: int):
    """Allocate the sharded parameters on `device` and initialise them as transformers does
    (normal(0, initializer_range) for linear and embedding weights, ones for RMSNorm), each
    rank's shard from its own seed; rebuild the rotary buffers, which meta cannot hold."""
    model.to_empty(device=device)
    std = model.config.initializer_range
    torch.manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    torch.nn.init.zeros_(module.bias)
            elif type(module).__name__.endswith("RMSNorm"):
                torch.nn.init.ones_(module.weight)
    rotary = model.model.rotary_emb
    model.model.rotary_emb = type(rotary)(config=model.config, device=device)
    return model
