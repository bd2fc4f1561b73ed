"""Loaders: HF safetensors directories and the SmolLM2 GGUF, checked against transformers.

transformers' `from_pretrained(dir, gguf_file=...)` needs `accelerate`, which is not installed
here, so the GGUF reference is built from transformers' own GGUF reader
(`load_gguf_checkpoint`: its metadata parsing, dequantisation and Q/K reverse-permutation) loaded
into a `LlamaForCausalLM`. That is the same code path from_pretrained uses after the accelerate check.
"""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from compute_worker.loaders.gguf_loader import default_model_path, load_gguf  # noqa: E402
from compute_worker.loaders.hf_loader import load_hf_dir  # noqa: E402
from compute_worker.loaders.device import pick_device, pick_dtype  # noqa: E402
from compute_worker.loaders.registry import load_model  # noqa: E402

TINY = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=80, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False, eos_token_id=[2, 5])),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(
        vocab_size=80, hidden_size=48, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=48)),
}


def save_tiny(kind: str, path, shard: str | None = None):
    cfg_cls, model_cls, kwargs = TINY[kind]
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**kwargs)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))  # non-zero biases, non-unit norms
    hf.save_pretrained(path, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    return hf


@pytest.mark.parametrize("kind,shard", [("llama", None), ("llama", "20KB"), ("opt", None)])
def test_hf_dir_matches_transformers(tmp_path, kind, shard):
    hf = save_tiny(kind, tmp_path, shard)
    n_files = len(list(tmp_path.glob("*.safetensors")))
    assert n_files > 1 if shard else n_files == 1
    model, tok = load_hf_dir(tmp_path, device="cpu", dtype=torch.float32)
    assert tok is None  # no tokenizer.json was saved
    ids = torch.randint(0, 80, (19,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    out = model.forward([(ids, model.new_cache())])[0].logits
    assert (ref - out).abs().max().item() < 1e-4
    if kind == "llama":
        assert model.config.eos_token_ids == [2, 5]
    # the registry routes a directory to the same loader
    m2, _ = load_model(str(tmp_path), device="cpu")
    assert m2.dtype == torch.float32 and type(m2) is type(model)


def test_hf_dir_tokenizer_json(tmp_path):
    from compute_worker.tokenizer import ChatTokenizer

    save_tiny("llama", tmp_path)
    gguf_tok = ChatTokenizer.from_gguf(default_model_path())
    gguf_tok.tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": gguf_tok.chat_template, "eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    _, tok = load_hf_dir(tmp_path, device="cpu")
    msgs = [{"role": "user", "content": "Héllo 42?"}]
    assert tok.apply_chat_template(msgs) == gguf_tok.apply_chat_template(msgs)
    assert tok.bos_token_id == 1 and set(tok.eos_token_ids) == {0, 2, 5}


def test_hf_dir_missing_tensor_is_an_error(tmp_path):
    save_tiny("llama", tmp_path)
    from safetensors.torch import load_file, save_file

    f = next(tmp_path.glob("*.safetensors"))
    sd = load_file(f)
    del sd["model.layers.1.mlp.up_proj.weight"]
    save_file(sd, f, metadata={"format": "pt"})
    with pytest.raises(KeyError, match="lacks"):
        load_hf_dir(tmp_path, device="cpu")


def test_registry_defaults():
    assert pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_dtype("cpu") == torch.float32 and pick_dtype("cuda") == torch.bfloat16
    with pytest.raises(ValueError):
        load_model("/nonexistent/model")


# ---- GGUF -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ours():
    return load_gguf(device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def reference():
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    path = str(default_model_path())
    meta = load_gguf_checkpoint(path)["config"]
    cfg = LlamaConfig(**{k: v for k, v in meta.items() if k not in ("model_type", "architectures")},
                      attn_implementation="eager")
    with torch.device("meta"):  # skip random init of 135M parameters; every tensor is assigned below
        ref = LlamaForCausalLM(cfg)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=ref)["tensors"]
    ref.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False, assign=True)
    ref.tie_weights()
    ref.model.rotary_emb = LlamaRotaryEmbedding(cfg)
    assert not any(t.is_meta for t in [*ref.parameters(), *ref.buffers()])
    return ref.eval()


def test_our_gguf_reader_reads_what_the_gguf_package_reads():
    """loaders/gguf_file.py against the `gguf` package's reader on the real file: every
    metadata value equal, and the tensors of every type in it (F32, Q8_0, Q4_1) bit for bit
    equal to gguf.quants' dequantisation, in the same shape."""
    import gguf
    from gguf.quants import dequantize

    from compute_worker.loaders.gguf_file import GGUFFile

    path = default_model_path()
    ours, theirs = GGUFFile(path), gguf.GGUFReader(str(path))
    expected = {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert ours.fields == expected
    assert len(ours.fields["tokenizer.ggml.tokens"]) == 49152
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    seen = set()
    for mine, t in zip(ours.tensors, theirs.tensors):
        if t.tensor_type in seen and not mine.name.startswith("blk.29."):
            continue  # one of each type, and the whole last layer
        seen.add(t.tensor_type)
        want = torch.from_numpy(dequantize(t.data, t.tensor_type).astype("float32"))
        got = ours.tensor(mine)
        assert got.shape == want.shape and torch.equal(got, want), mine.name
    assert {gguf.GGMLQuantizationType(k).name for k in seen} == {"F32", "Q8_0", "Q4_1"}
    q4 = next(t for t in ours.tensors if len(t.shape) == 2 and t.type == 3)  # a Q4_1 matrix
    # the fallback for the types not dequantised here gives the same values, in the same shape
    assert torch.equal(ours.tensor_by_gguf(q4), ours.tensor(q4))


def test_gguf_config(ours):
    model, tok = ours
    c = model.config
    assert (c.arch, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == \
        ("llama", 30, 576, 9, 3, 64)
    assert c.tie_word_embeddings and c.rope_theta == 100000.0 and c.max_position == 8192
    assert c.eos_token_ids == [2] and tok.decode([2]) == "<|im_end|>"


def test_gguf_weights_equal_transformers(ours, reference):
    model, _ = ours
    # Q/K checks the un-permutation; identical dequantisation means bit-exact equality
    for i in (0, 29):
        for p in ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj"):
            a = getattr(model.layers[i], p).weight
            b = getattr(reference.model.layers[i], "self_attn" if p[0] in "qkvo" else "mlp")
            assert torch.equal(a, getattr(b, p).weight), (i, p)
    assert torch.equal(model.embed.weight, reference.model.embed_tokens.weight)


def test_gguf_logits_and_greedy_match_transformers(ours, reference):
    model, tok = ours
    ids = tok.apply_chat_template([{"role": "user", "content": "Name three colours of the rainbow."}])
    x = torch.tensor(ids)
    with torch.no_grad():
        ref = reference(x[None]).logits[0]
    cache = model.new_cache()
    out = model.forward([(x, cache)])[0].logits
    # Same fp32 weights; only summation order differs (eager vs SDPA attention, fused rms_norm)
    # over 30 layers. Logits have std ~8 here; observed max diff ~9e-5, bound with ~10x margin.
    assert ref.std() > 1.0
    print("max |logit diff| vs transformers:", (ref - out).abs().max().item(), "std", ref.std().item())
    assert (ref - out).abs().max().item() < 1e-3
    # greedy decoding: ours token by token from the cache vs transformers generate()
    n = 10
    with torch.no_grad():
        want = reference.generate(x[None], max_new_tokens=n, do_sample=False, pad_token_id=2,
                                  eos_token_id=None)[0, len(ids):].tolist()
    got, logits = [], out[-1]
    for _ in range(n):
        got.append(int(logits.argmax()))
        logits = model.forward([(torch.tensor(got[-1:]), cache)])[0].logits[-1]
    assert got == want, (tok.decode(got), tok.decode(want))
    assert cache.length == len(ids) + n


def test_registry_default_is_smollm2():
    model, tok = load_model("smollm2-135m", device="cpu")
    assert model.config.num_layers == 30 and tok.vocab_size == 49152
    # generation config files are read when present (tested via the llama dir above); GGUF has none
    assert json.dumps(dataclasses.asdict(model.config))
