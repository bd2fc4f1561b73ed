"""The q4 Llama decode step in one native call (compute_worker/models/native_decode.py): it
computes what the layers compute (random-weight Llama and Qwen2 models, biases and Llama 3 rope
included), and a one-token row takes it whatever the rows beside it, so its bits depend on the
row alone."""
from __future__ import annotations

import copy

import pytest
import torch

from compute_worker.models.prepare import prepare_model
from tests.test_models import make_hf, ours_from_hf, run, tokens

LLAMAS = ["llama_gqa", "llama_bias_llama3rope_tied", "qwen2_qkv_bias"]


def q4_model(key: str):
    model = ours_from_hf(make_hf(key))
    prepare_model(model, "q4")
    assert model.native_decode is not None
    return model


def decode(model, ids: torch.Tensor, prompt: int, native: bool):
    """Prefill ids[:prompt] through the layers, then one step per remaining token; the steps
    the native call ran."""
    saved, cache, calls = model.native_decode, model.new_cache(capacity=4), []
    model.forward([(ids[:prompt], cache)])
    model.native_decode = (lambda *a: calls.append(1) or saved(*a)) if native else None
    try:
        outs = [run(model, ids[i:i + 1], cache)[0] for i in range(prompt, len(ids))]
        return outs, cache, len(calls)
    finally:
        model.native_decode = saved


@pytest.mark.parametrize("key", LLAMAS)
def test_the_native_step_computes_what_the_layers_compute(key):
    model = q4_model(key)
    ids = tokens(24, 1)
    native, kv, calls = decode(model, ids, 12, native=True)
    layers, kv_layers, none = decode(model, ids, 12, native=False)
    assert (calls, none) == (12, 0)
    for a, b in zip(native, layers):
        # the same model: only the rounding of the int8 activations can differ between the two
        # (a last-bit difference flips a rounding); bounds ~3x the differences observed
        assert (a.logits - b.logits).abs().max() < 0.05 * b.logits.std()
        assert torch.allclose(a.hidden6[:, 0], b.hidden6[:, 0], atol=1e-5)  # layer 0's norm
        assert (a.hidden6 - b.hidden6).abs().max() < 0.05 * b.hidden6.abs().max()
    assert kv.length == kv_layers.length == 24
    assert (kv.data[:, :, :, :24] - kv_layers.data[:, :, :, :24]).abs().max() < 0.05


@pytest.mark.parametrize("key", LLAMAS[:2])
def test_a_decode_rows_bits_do_not_depend_on_its_batch(key):
    model = q4_model(key)
    caches = []
    for seed in range(3):
        cache = model.new_cache(capacity=4)
        model.forward([(tokens(10 + seed, seed), cache)])
        caches.append(cache)
    step = [torch.tensor([5]), torch.tensor([7]), torch.tensor([9])]
    alone = [model.forward([(t, copy.deepcopy(c))])[0].logits for t, c in zip(step, caches)]
    batch = [copy.deepcopy(c) for c in caches]
    together = model.forward(list(zip(step, batch)))
    prefill = model.new_cache(capacity=4)  # a prefill beside a decode: each runs its own way
    mixed = model.forward([(tokens(9, 5), prefill), (step[1], copy.deepcopy(caches[1]))])
    for i in range(3):
        assert torch.equal(together[i].logits, alone[i])
    assert torch.equal(mixed[1].logits, alone[1])
    assert torch.equal(mixed[0].logits,
                       model.forward([(tokens(9, 5), model.new_cache(capacity=4))])[0].logits)
    assert prefill.length == 9
    assert [c.length for c in batch] == [c.length + 1 for c in caches]
