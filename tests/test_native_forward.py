"""A q4 Llama's layers in one native call (compute_worker/models/native_forward.py): it computes
what the layers compute (random-weight Llama and Qwen2 models, biases and Llama 3 rope included),
and every row alone: chunked, token by token or in a batch, a row's bits are the same, so q4
needs no aligned KV blocks, and tensor 6 -> K/V gives the forward's own K/V."""
from __future__ import annotations

import copy

import pytest
import torch

from compute_worker.models.prepare import prepare_model
from tests.test_models import make_hf, ours_from_hf, run, three_ways, tokens

LLAMAS = ["llama_gqa", "llama_bias_llama3rope_tied", "qwen2_qkv_bias"]


def q4_model(key: str):
    model = ours_from_hf(make_hf(key))
    prepare_model(model, "q4")
    assert model.native is not None and model.kv_block == 0
    return model


@pytest.mark.parametrize("key", LLAMAS)
def test_the_native_forward_computes_what_the_layers_compute(key):
    model = q4_model(key)
    ids = tokens(30, 1)
    calls, native = [], model.native
    model.native = lambda *a: calls.append(1) or native(*a)
    ours, kv = run(model, ids)
    model.native = None
    layers, kv_layers = run(model, ids)
    assert calls == [1]
    # the same model: the rounding of the int8 activations can differ between the two (a
    # last-bit difference in a norm flips a rounding); bounds ~3x the differences observed
    assert (ours.logits - layers.logits).abs().max() < 0.05 * layers.logits.std()
    assert torch.allclose(ours.hidden6[:, 0], layers.hidden6[:, 0], atol=1e-5)  # layer 0's norm
    assert (ours.hidden6 - layers.hidden6).abs().max() < 0.05 * layers.hidden6.abs().max()
    assert (kv.data[:, :, :, :30] - kv_layers.data[:, :, :, :30]).abs().max() < 0.05
    assert ours.logits.argmax(-1).eq(layers.logits.argmax(-1)).float().mean() > 0.9


@pytest.mark.parametrize("key", LLAMAS)
def test_chunks_steps_and_one_pass_agree_bit_for_bit(key):
    model = q4_model(key)
    ids = tokens(21, 2)
    full, cache, chunks, chunked, logits, steps = three_ways(model, ids, 8)
    assert torch.equal(full.logits, chunks)
    assert torch.equal(full.logits, logits)
    assert torch.equal(cache.to_token_major(), chunked.to_token_major())
    assert torch.equal(cache.to_token_major(), steps.to_token_major())
    # tensor 6 -> K/V (the layers' projection and rope on the forward's own inputs): same bits
    assert torch.equal(model.kv_from_hidden6(full.hidden6, 0), cache.data[:, :, :, :21])


def test_a_rows_bits_do_not_depend_on_its_batch():
    model = q4_model("llama_bias_llama3rope_tied")
    caches = []
    for seed in range(3):
        cache = model.new_cache(capacity=4)
        model.forward([(tokens(10 + seed, seed), cache)])
        caches.append(cache)
    step = [torch.tensor([5]), torch.tensor([7]), tokens(6, 9)]  # two decodes, a prefill chunk
    alone = [model.forward([(t, copy.deepcopy(c))])[0].logits for t, c in zip(step, caches)]
    batch = [copy.deepcopy(c) for c in caches]
    together = model.forward(list(zip(step, batch)))
    for i in range(3):
        assert torch.equal(together[i].logits, alone[i])
    assert [c.length for c in batch] == [11, 12, 18]
    last = model.forward(list(zip(step, [copy.deepcopy(c) for c in caches])), logits_last_only=True)
    assert torch.equal(last[2].logits, alone[2][-1:])


def test_bad_batches_are_refused():
    model = q4_model("llama_gqa")
    cache = model.new_cache()
    with pytest.raises(ValueError, match="KVCache of its own"):
        model.forward([(torch.tensor([1]), cache), (torch.tensor([2]), cache)])
    with pytest.raises(ValueError, match="no new tokens"):
        model.forward([(torch.tensor([], dtype=torch.long), cache)])
    assert cache.length == 0
