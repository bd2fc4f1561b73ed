"""The packed batch's attention on the test device ($BIDAW_TEST_DEVICE, cpu by default): the
fused call equals the per-sequence loop for mixed prefill + decode batches with GQA and MHA,
the model equals transformers with whichever path the device's rule picks, and KV restored from
stored bytes (through the pinned host copy on CUDA) continues exactly like the computed cache."""
from __future__ import annotations

import pytest
import torch

from compute_worker import kv_codec
from compute_worker.models.attention import Packed, forced_path
from tests.devices import model_device
from tests.test_models import make_hf, ours_from_hf, tokens

DEVICE = model_device()


@pytest.fixture(scope="module", params=["llama_gqa", "opt_prenorm"])
def pair(request):
    hf = make_hf(request.param)
    return hf, ours_from_hf(hf).to(DEVICE)


def mixed_batch(model, seed: int):
    """(new tokens, cache) for: a decode after 9 tokens, a fresh 13-token prefill, a 7-token
    chunk after 4 tokens, a decode after 30 tokens, and a 2-token chunk after 1 token."""
    specs = [(9, 1), (0, 13), (4, 7), (30, 1), (1, 2)]
    batch = []
    for i, (cached, new) in enumerate(specs):
        cache = model.new_cache(capacity=2)
        if cached:
            model.forward([(tokens(cached, seed + i), cache)])
        batch.append((tokens(new, seed + 10 + i), cache))
    return batch


def run_path(model, path: str, seed: int = 0):
    """Logits of one mixed batch and then of one all-decode step, with the attention forced."""
    batch = mixed_batch(model, seed)
    with forced_path(path):
        first = model.forward(batch)
        step = model.forward([(tokens(1, seed + 20 + i), c) for i, (_, c) in enumerate(batch)])
    return [o.logits for o in first + step], [c for _, c in batch]


def test_fused_matches_the_loop_on_mixed_batches(pair):
    _, ours = pair
    loop, loop_caches = run_path(ours, "loop")
    fused, fused_caches = run_path(ours, "fused")
    assert [t.shape for t in loop] == [t.shape for t in fused]
    for a, b in zip(loop, fused):
        assert (a - b).abs().max().item() < 1e-5
    assert loop[0].std() > 0.05  # not near-zero tensors
    for a, b in zip(loop_caches, fused_caches):
        assert a.length == b.length
        assert (a.data[:, :, :, :a.length] - b.data[:, :, :, :b.length]).abs().max() < 1e-5
    with forced_path("fused"):  # the forced path is the one that ran
        packed = Packed(mixed_batch(ours, 0), DEVICE)
    assert packed.fused is not None and packed.looped_seqs == []
    assert packed.fused.mask.shape == (5, 13, 31)  # 5 sequences, 13 queries, 31 keys at most


@pytest.mark.parametrize("path", [None, "fused"])
def test_matches_transformers_on_the_test_device(pair, path):
    hf, ours = pair
    ids = [tokens(23, 1), tokens(5, 2)]
    with torch.no_grad():
        refs = [hf(x[None]).logits[0] for x in ids]
    caches = [ours.new_cache(capacity=4) for _ in ids]
    if path is None:
        outs = ours.forward(list(zip(ids, caches)))
    else:
        with forced_path(path):
            outs = ours.forward(list(zip(ids, caches)))
    for ref, out in zip(refs, outs):
        assert out.logits.shape == ref.shape and out.logits.device.type == DEVICE.type
        assert (ref - out.logits.cpu()).abs().max().item() < 1e-4


@pytest.mark.parametrize("fmt", [kv_codec.KV, kv_codec.TENSOR6])
def test_restored_kv_continues_like_the_computed_cache(pair, fmt):
    _, ours = pair
    ids = tokens(20, 8)
    cache = ours.new_cache()
    out = ours.forward([(ids, cache)], want_hidden6=True)[0]
    stored = out.hidden6 if fmt == kv_codec.TENSOR6 else cache.to_token_major()
    kv = kv_codec.kv_from_bytes(ours, fmt, kv_codec.to_bytes(stored), ours.dtype)
    assert kv.device.type == DEVICE.type
    computed = cache.data[:, :, :, :cache.length]
    if fmt == kv_codec.KV:
        assert torch.equal(kv, computed)  # stored K/V come back bit for bit
    else:
        assert (kv - computed).abs().max().item() < 1e-5
    restored = ours.new_cache()
    restored.extend(kv)
    nxt = tokens(3, 9)
    ref = ours.forward([(nxt, cache)])[0].logits
    again = ours.forward([(nxt, restored)])[0].logits
    assert (ref - again).abs().max().item() < 1e-5
    assert ref.argmax(-1).tolist() == again.argmax(-1).tolist()


def test_fused_matches_the_loop_on_smollm2(smollm):
    """The real model (GQA, 9 query heads over 3 K/V heads, 30 layers): a batch of two decodes,
    a chunked prefill and a fresh prefill gives the loop's logits and greedy tokens fused."""
    model, _ = smollm
    gen = torch.Generator().manual_seed(4)
    ids = lambda n: torch.randint(100, 30000, (n,), generator=gen)  # noqa: E731
    prefixes = [model.new_cache() for _ in range(3)]
    model.forward([(ids(n), c) for n, c in zip((12, 5, 9), prefixes)], logits_last_only=True)
    news = [ids(1), ids(1), ids(6), ids(9)]
    outs = {}
    for path in ("loop", "fused"):
        caches = [model.new_cache() for _ in range(4)]
        for prefix, cache in zip(prefixes, caches):
            cache.extend(prefix.data[:, :, :, :prefix.length])
        with forced_path(path):
            outs[path] = [o.logits for o in model.forward(list(zip(news, caches)))]
    for a, b in zip(outs["loop"], outs["fused"]):
        assert (a - b).abs().max().item() < 1e-4
        assert a.argmax(-1).tolist() == b.argmax(-1).tolist()
