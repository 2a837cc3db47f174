"""The sample job's model and metrics against outside truths: a loss computed by hand, the
published LLaMA 3.1 8B config, its published parameter count and torchtitan's figures."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import pytest
import torch
import torch.distributed as dist

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "training"))  # train.py imports its neighbours as the image does
import data_stream  # noqa: E402
import model_shape  # noqa: E402
import train  # noqa: E402

PUBLISHED_8B = json.loads((ROOT / "tests" / "fixtures" / "llama3.1-8b-config.json").read_text())


def _tiny_model(vocab: int = 50, seed: int = 0):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(train.model_config(model_shape.PRESETS["tiny"], vocab))


def test_reported_loss_is_the_cross_entropy_of_each_position_against_its_next_token():
    model = _tiny_model()
    rows = torch.randint(50, (2, 9), generator=torch.Generator().manual_seed(1))
    inputs, targets, *_ = next(train.batches(iter(rows.tolist()), 2, torch.device("cpu")))
    logits = model(input_ids=inputs).logits
    loss = train.next_token_loss(logits, targets).item()
    # By hand, in float64: -log softmax(logits at t)[token at t+1], averaged over every position.
    terms = []
    for b in range(2):
        for t in range(8):
            row = logits[b, t].double()
            terms.append(torch.logsumexp(row, 0).item() - row[rows[b, t + 1]].item())
    assert loss == pytest.approx(sum(terms) / len(terms), abs=1e-5)


def test_llama31_8b_preset_matches_the_published_config_field_by_field():
    ours = train.model_config(model_shape.PRESETS["llama3.1-8b"], PUBLISHED_8B["vocab_size"]).to_dict()
    for key, published in PUBLISHED_8B.items():
        if not key.startswith("_"):
            assert ours[key] == published, key


def test_the_embedding_follows_the_tokenizer_in_use():
    config = train.model_config(model_shape.PRESETS["llama3.1-8b"], 32000)
    assert config.vocab_size == 32000


def test_parameter_count_matches_transformers_and_the_published_8b_size():
    model = _tiny_model(vocab=50)
    total, non_embedding = model_shape.parameters(model_shape.PRESETS["tiny"], 50)
    assert total == sum(p.numel() for p in model.parameters())
    assert non_embedding == total - model.model.embed_tokens.weight.numel()
    # Built on the meta device: no memory, and the count Meta publishes (8.03B).
    big = train.build_model(train.model_config(model_shape.PRESETS["llama3.1-8b"], 128256))
    assert sum(p.numel() for p in big.parameters()) == model_shape.parameters(model_shape.PRESETS["llama3.1-8b"], 128256)[0]
    assert round(model_shape.parameters(model_shape.PRESETS["llama3.1-8b"], 128256)[0] / 1e9, 2) == 8.03


def test_mfu_of_torchtitans_published_throughput_is_its_published_mfu():
    # torchtitan docs/performance.md: LLaMA 3 8B, 8 H100, seq 8192, torch.compile: about 6,670
    # tokens/s per GPU at about 39% MFU (its own formula: 6N without the embedding, plus attention).
    mfu = model_shape.mfu(6670 * 8, model_shape.PRESETS["llama3.1-8b"], 128256, 8192, devices=8, peak=989.0)
    assert mfu == pytest.approx(0.39, abs=0.005)


def test_flops_per_token_is_torchtitans_formula_by_hand():
    p = model_shape.PRESETS["tiny"]
    # Hand count for the tiny shape, vocab 50: per layer q,o 64x64 each; k,v 64x32 each;
    # MLP 3 x 64x128; two norms of 64. Then the final norm and the 64x50 head.
    per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    non_embedding = 2 * per_layer + 64 + 64 * 50
    assert model_shape.flops_per_token(p, 50, 32) == 6 * non_embedding + 12 * 2 * 4 * 16 * 32


@pytest.mark.parametrize(
    "name, tflops",
    [
        # CUDA's device names on the instance types HyperPod offers; dense bf16 peaks from the
        # data sheets, GB200's from torchtitan (tools/utils.py get_peak_flops: 2.5e15).
        ("NVIDIA GB200", 2500.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        # The H100's variants, each its own peak (torchtitan/tools/utils.py get_peak_flops: NVL
        # 835e12, PCIe 756e12, SXM and others 989e12; NVIDIA's H100 data sheet).
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10G", 70.0),
        ("Tesla T4", None),
    ],
)
def test_peak_tflops_takes_the_gpu_named_as_a_whole_word(name, tflops):
    assert model_shape.peak_tflops(name) == tflops


def test_every_nvidia_gpu_of_the_instance_catalogue_finds_its_own_peak_or_none():
    # The job's throughput rule sizes itself from the catalogue's names ("A100-80GB", "GB200", and
    # DescribeInstanceTypes' "RTX PRO Server 6000"): a GPU the table lacks gets no floor, never another's.
    from infra import catalogue

    for spec in catalogue.CATALOGUE.values():
        if spec.is_accelerated and spec.accelerator_resource == "nvidia.com/gpu":
            expected = {"A100-80GB": "A100"}.get(spec.accelerator, spec.accelerator)
            assert model_shape.peak_tflops(spec.accelerator) == model_shape.PEAK_TFLOPS.get(expected), spec.name
    assert model_shape.peak_tflops(catalogue.lookup("ml.p5.4xlarge").accelerator) == model_shape.PEAK_TFLOPS["H100"]


@contextmanager
def _one_process_group():
    # A store on a free port, passed in rather than through the environment, which the
    # training subprocesses of other tests inherit.
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_model_built_on_meta_materialises_as_transformers_builds_it():
    from transformers import LlamaForCausalLM

    preset = model_shape.Preset(**{**model_shape.PRESETS["tiny"].__dict__, "rope_scaling": model_shape.PRESETS["llama3.1-8b"].rope_scaling})
    config = train.model_config(preset, 50)
    reference = LlamaForCausalLM(config)
    with _one_process_group():
        model = train.shard(
            train.build_model(config), torch.device("cpu"), bf16=False, activation_checkpointing="full", compile_layers=False, units="layers"
        )
        train.materialise(model, torch.device("cpu"), seed=0)
        # The llama3-scaled rotary frequencies, which the meta device cannot hold, are rebuilt.
        assert torch.equal(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
        assert model.model.rotary_emb.inv_freq.device.type == "cpu"
        weights = {n: p.full_tensor() for n, p in model.named_parameters()}
    for name, value in weights.items():
        assert torch.isfinite(value).all(), name
        if name.endswith("norm.weight"):
            assert torch.equal(value, torch.ones_like(value)), name
    # transformers' initializer: normal(0, initializer_range).
    proj = torch.cat([v.flatten() for n, v in weights.items() if n.endswith("proj.weight")])
    assert proj.std().item() == pytest.approx(config.initializer_range, rel=0.05)
    assert abs(proj.mean().item()) < 1e-3


def test_the_hugging_face_token_is_read_from_the_secret_the_job_names(monkeypatch):
    # Against moto's Secrets Manager (GetSecretValue as the API answers it): the job passes the
    # secret's name (manifests/job.py), train.py reads the value with the pod's own credentials.
    import boto3
    import botocore.session
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        sm.create_secret(Name="hyperpod/prod/hf-token", SecretString="hf_plain\n")
        sm.create_secret(Name="hyperpod/prod/hf-json", SecretString='{"token": "hf_json"}')
        client = botocore.session.get_session().create_client("secretsmanager", region_name="us-east-1")
        env = {data_stream.HF_TOKEN_SECRET_ENV: "hyperpod/prod/hf-token", "AWS_REGION": "us-east-1"}
        assert data_stream.load_hf_token(env, client=client) == "hyperpod/prod/hf-token" and env["HF_TOKEN"] == "hf_plain"
        env = {data_stream.HF_TOKEN_SECRET_ENV: "hyperpod/prod/hf-json"}
        data_stream.load_hf_token(env, client=client)
        assert env["HF_TOKEN"] == "hf_json"
        # A token already given wins; no secret named, nothing read.
        assert data_stream.load_hf_token({data_stream.HF_TOKEN_SECRET_ENV: "x", "HF_TOKEN": "given"}, client=object()) is None
        assert data_stream.load_hf_token({}, client=object()) is None


def _document_losses(logits, rows, spans):
    """By hand, in float64: each span's (document's) mean of -log softmax(logits at t)[token at t+1]."""
    losses = []
    for b, first, last in spans:
        terms = [torch.logsumexp(logits[b, t].double(), 0).item() - logits[b, t, rows[b, t + 1]].double().item() for t in range(first, last)]
        losses.append(sum(terms) / len(terms))
    return losses


def test_with_document_masking_each_packed_document_has_the_loss_it_has_alone():
    # Llama 3 marks a document with <|begin_of_text|> (128000) before it and <|end_of_text|> (128001)
    # after it (meta-llama/Llama-3.1-8B's tokenizer_config.json: bos_token, eos_token), and torchtitan
    # packs text so (test_each_document_is_packed_between_begin_and_end_of_text). Ids 1 and 2 stand
    # for them here: three documents packed in a row, each masked to itself.
    bos, eos = 1, 2
    docs = [[bos, 7, 9, 11, 13, eos], [bos, 20, 21, eos], [bos, 30, 31, 32, 33, 34, eos]]
    packed = torch.tensor([[t for d in docs for t in d]])
    model = _tiny_model()
    model.eval()
    segments = train.document_segments(packed, eos)
    assert segments[0].tolist() == [[0] * 6 + [1] * 4 + [2] * 7] and segments[1].tolist() == [list(range(6)) + list(range(4)) + list(range(7))]
    with torch.no_grad():
        masked = train.logits_of(model, packed, segments)
        plain = train.logits_of(model, packed)
        alone = [train.logits_of(model, torch.tensor([d])) for d in docs]
    spans, at = [], 0
    for d in docs:
        spans.append((0, at, at + len(d) - 1))  # each position predicting the next token of its own document
        at += len(d)
    by_hand_alone = [_document_losses(logits, torch.tensor([d]), [(0, 0, len(d) - 1)])[0] for logits, d in zip(alone, docs)]
    assert _document_losses(masked, packed, spans) == pytest.approx(by_hand_alone, abs=1e-5)
    # Without the mask the later documents see the earlier ones: their losses differ.
    unmasked = _document_losses(plain, packed, spans)
    assert unmasked[0] == pytest.approx(by_hand_alone[0], abs=1e-5) and unmasked[1] != pytest.approx(by_hand_alone[1], abs=1e-4)


def test_the_causal_forward_makes_no_mask_and_syncs_nothing(monkeypatch):
    # SDPA gets is_causal and no mask (its flash kernel on a GPU), and no mask check runs on the
    # device: transformers' own SDPA mask would ask `padding_mask.all()` of an all-ones mask, a
    # device-to-host sync per forward (masking_utils._ignore_causal_mask_sdpa).
    from transformers import masking_utils

    rows = torch.randint(50, (2, 9), generator=torch.Generator().manual_seed(1))
    stock = _tiny_model()
    stock.config._attn_implementation = "sdpa"  # transformers' own mask, the path train.py left
    reference = stock(input_ids=rows, attention_mask=torch.ones_like(rows)).logits
    model = _tiny_model()
    seen, real = [], torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal")))
        return real(*args, **kwargs)

    def no_check(*args, **kwargs):
        raise AssertionError("the SDPA mask check ran")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(masking_utils, "_ignore_causal_mask_sdpa", no_check)
    assert model.config._attn_implementation == train.CAUSAL_ATTENTION
    assert train.logits_of(model, rows).equal(reference)  # the same logits
    assert seen and set(seen) == {(True, True)}


def test_each_document_is_packed_between_begin_and_end_of_text(workdir):
    # torchtitan's text datasets encode each sample with add_bos=True, add_eos=True
    # (pytorch/torchtitan @ b5bcd76, torchtitan/hf_datasets/text_datasets.py), as Llama 3 was
    # trained: the stream puts the tokenizer's own begin- and end-of-text ids around each document.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(workdir / "tok")
    args = train.parse_args(["--data-files", str(workdir / "corpus.txt"), "--shuffle-buffer=0"])
    chunk = next(train.TokenStream(train.load_stream(args, 0, 1), tokenizer, 63, "text"))
    lines = (workdir / "corpus.txt").read_text().splitlines()
    expected = []
    for line in lines[:10]:
        expected += [tokenizer.bos_token_id, *tokenizer(line, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    assert tokenizer.bos_token_id is not None and chunk == expected[:64]
