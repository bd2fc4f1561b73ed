"""Our Llama/Qwen2/OPT model code against transformers, plus cache/batching/tensor-6 invariants."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from compute_worker.loaders.hf_loader import config_from_hf  # noqa: E402
from compute_worker.models import KVCache, build_model, kv_from_token_major, kv_to_token_major  # noqa: E402
from compute_worker.models.weights import HF_TABLES, load_weights  # noqa: E402
from compute_worker.tensor_choice import choose_tensor  # noqa: E402

VOCAB = 96
LLAMA_BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, rope_theta=10000.0, attn_implementation="eager")
CONFIGS = {
    "llama_gqa": ("LlamaConfig", "LlamaForCausalLM", dict(LLAMA_BASE, tie_word_embeddings=False)),
    "llama_bias_llama3rope_tied": ("LlamaConfig", "LlamaForCausalLM", dict(
        LLAMA_BASE, attention_bias=True, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
    "qwen2_qkv_bias": ("Qwen2Config", "Qwen2ForCausalLM", dict(LLAMA_BASE, tie_word_embeddings=False)),
    "opt_prenorm": ("OPTConfig", "OPTForCausalLM", dict(
        vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=64, attn_implementation="eager")),
    "opt_postnorm_proj": ("OPTConfig", "OPTForCausalLM", dict(
        vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=32, do_layer_norm_before=False,
        attn_implementation="eager")),
}


def make_hf(key: str, seed: int = 0):
    cfg_cls, model_cls, kwargs = CONFIGS[key]
    torch.manual_seed(seed)
    hf = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**kwargs)).eval()
    with torch.no_grad():  # non-trivial norms and biases so a wrong mapping cannot pass
        for name, p in hf.named_parameters():
            if p.ndim == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    return hf


def ours_from_hf(hf):
    cfg = config_from_hf(hf.config.to_dict())
    model = build_model(cfg, device="cpu", dtype=torch.float32)
    load_weights(model, hf.state_dict().items(), HF_TABLES[cfg.arch])
    return model


def run(model, ids: torch.Tensor, cache: KVCache | None = None):
    cache = cache if cache is not None else model.new_cache(capacity=4)
    return model.forward([(ids, cache)], want_hidden6=True)[0], cache


@pytest.fixture(scope="module", params=list(CONFIGS))
def pair(request):
    hf = make_hf(request.param)
    return hf, ours_from_hf(hf)


def three_ways(model, ids: torch.Tensor, split: int):
    """ids run in one pass, in two chunks (cut at `split`) and token by token: (one pass's
    ForwardOut and cache, the chunks' logits and cache, the steps' logits and cache)."""
    full, cache = run(model, ids)
    a, chunked = run(model, ids[:split])
    b, _ = run(model, ids[split:], chunked)
    steps = model.new_cache(capacity=1)  # forces several doublings
    logits = torch.cat([run(model, ids[i:i + 1], steps)[0].logits for i in range(len(ids))])
    return full, cache, torch.cat([a.logits, b.logits]), chunked, logits, steps


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def test_matches_transformers(pair):
    hf, ours = pair
    ids = tokens(23, 1)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    out, cache = run(ours, ids)
    assert out.logits.shape == (23, VOCAB)
    assert cache.length == 23
    assert (ref - out.logits).abs().max().item() < 1e-4
    assert ref.std() > 0.05  # the comparison is not between near-zero tensors


def test_chunked_prefill_and_decode_match_one_shot(pair):
    _, ours = pair
    ids = tokens(17, 2)
    full, _ = run(ours, ids)
    a, cache = run(ours, ids[:6])
    b, _ = run(ours, ids[6:], cache)
    chunked = torch.cat([a.logits, b.logits])
    cache = ours.new_cache(capacity=1)  # forces several doublings
    steps = [run(ours, ids[i:i + 1], cache)[0].logits for i in range(len(ids))]
    assert cache.length == 17 and cache.capacity >= 17
    assert torch.allclose(full.logits, chunked, atol=1e-5)
    assert torch.allclose(full.logits, torch.cat(steps), atol=1e-5)
    assert torch.allclose(full.hidden6, torch.cat([a.hidden6, b.hidden6]), atol=1e-5)


def test_mixed_batch_matches_single_sequences(pair):
    _, ours = pair
    # (prefix already in cache, new tokens): a decode step, a fresh prefill, a chunked prefill
    specs = [(tokens(9, 3), tokens(1, 4)), (None, tokens(13, 5)), (tokens(4, 6), tokens(7, 7))]
    alone, caches = [], []
    for prefix, new in specs:
        c = ours.new_cache()
        if prefix is not None:
            run(ours, prefix, c)
        alone.append(run(ours, new, c)[0])
        c2 = ours.new_cache()
        if prefix is not None:
            run(ours, prefix, c2)
        caches.append(c2)
    batched = ours.forward([(new, c) for (_, new), c in zip(specs, caches)], want_hidden6=True)
    for solo, out, c, (prefix, new) in zip(alone, batched, caches, specs):
        assert out.logits.shape == (len(new), VOCAB)
        assert out.hidden6.shape == (len(new), ours.config.num_layers, ours.config.hidden_size)
        assert torch.allclose(solo.logits, out.logits, atol=1e-5)
        assert c.length == len(new) + (0 if prefix is None else len(prefix))
    last = ours.forward([(new, ours.new_cache()) for _, new in specs[1:]], logits_last_only=True)
    assert [o.logits.shape for o in last] == [(1, VOCAB), (1, VOCAB)]
    assert torch.allclose(last[0].logits[0], alone[1].logits[-1], atol=1e-5)


def test_kv_from_hidden6_restores_cache(pair):
    _, ours = pair
    ids = tokens(20, 8)
    a, cache = run(ours, ids[:8])
    b, _ = run(ours, ids[8:], cache)
    restored = torch.cat([ours.kv_from_hidden6(a.hidden6, 0), ours.kv_from_hidden6(b.hidden6, 8)], dim=3)
    computed = kv_from_token_major(cache.to_token_major())
    assert restored.shape == computed.shape
    assert torch.allclose(restored, computed, atol=1e-5)
    # wrong positions must not pass for RoPE models
    if ours.config.arch == "llama":
        assert not torch.allclose(ours.kv_from_hidden6(b.hidden6, 0), computed[:, :, :, 8:20], atol=1e-3)
    # a cache rebuilt from tensor 6 continues exactly like the original
    nxt = tokens(3, 9)
    ref, _ = run(ours, nxt, cache)
    rebuilt = ours.new_cache()
    rebuilt.extend(restored)
    out, _ = run(ours, nxt, rebuilt)
    assert torch.allclose(ref.logits, out.logits, atol=1e-5)


def test_kv_cache_ops():
    cache = KVCache(3, 2, 4, capacity=2)
    blocks = [torch.randn(3, 2, 2, n, 4) for n in (3, 5)]
    for blk in blocks:
        cache.extend(blk)
    whole = torch.cat(blocks, dim=3)
    assert cache.length == 8 and cache.capacity >= 8
    assert torch.equal(kv_from_token_major(cache.to_token_major()), whole)
    assert torch.equal(kv_from_token_major(cache.to_token_major(3, 8)), blocks[1])
    assert cache.nbytes == 8 * cache.bytes_per_token == 8 * 3 * 2 * 2 * 4 * 4
    tm = kv_to_token_major(whole)
    assert tm.shape == (8, 3, 2, 2, 4) and torch.equal(tm[5], whole[:, :, :, 5])
    assert torch.equal(kv_from_token_major(tm), whole)
    # appending a turn in token-major bytes == concatenating the byte strings
    assert torch.equal(kv_to_token_major(whole).flatten(),
                       torch.cat([kv_to_token_major(b).flatten() for b in blocks]))
    assert torch.equal(cache.keys(1), whole[1, 0])
    # append() advances the length only after the last layer
    cache = KVCache(3, 2, 4, capacity=2)
    cache.extend(blocks[0])
    k = torch.randn(2, 1, 4)
    for layer in range(3):
        K, _ = cache.append(layer, k, k)
        assert K.shape == (2, 4, 4)
        assert cache.length == (3 if layer < 2 else 4)


def test_config_byte_sizes():
    hf = make_hf("llama_gqa")
    cfg = config_from_hf(hf.config.to_dict())
    assert cfg.kv_bytes_per_token(2) == 2 * 2 * 2 * 16 * 2
    assert cfg.hidden6_bytes_per_token(2) == 2 * 64 * 2
    assert choose_tensor(cfg) == "kv"  # GQA: K/V is smaller than tensor 6
    assert choose_tensor(config_from_hf(make_hf("opt_prenorm").config.to_dict())) == "tensor6"  # MHA
