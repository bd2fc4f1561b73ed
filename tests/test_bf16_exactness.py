"""bf16 serving is exact: KV restored from a real store (DRAM and SSD) is bit-identical to what
was saved; and `bench exactness` (restored-KV answers against recompute over seeded
conversations) matches in every conversation, in fp32 and, with block-aligned KV
(compute_worker/models/kv_blocks.py), in bf16."""
from __future__ import annotations

import pytest
import torch

from bench.exactness import first_difference, local_store, run_exactness, user_messages
from compute_worker import kv_codec
from compute_worker.models import kv_to_token_major
from compute_worker.store_connector import make_connector
from services.runtime.gen import common_pb2

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6
TIERS = {False: common_pb2.TIER_DRAM, True: common_pb2.TIER_SSD}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("ssd_only", [False, True], ids=["dram", "ssd"])
@pytest.mark.parametrize("fmt", [KV, T6], ids=["kv", "tensor6"])
def test_bf16_kv_comes_back_bit_identical(smollm_bf16, ssd_only, fmt):
    model, _ = smollm_bf16
    ids = torch.randint(100, 40000, (40,), generator=torch.Generator().manual_seed(5)).tolist()
    with local_store(ssd_only) as store:
        conn = make_connector(store, model, "smol", fmt)
        cache = model.new_cache(64)
        first = model.forward([(torch.tensor(ids[:25]), cache)], want_hidden6=True)[0]
        conn.save("s", ids[:25], cache, [first.hidden6])
        turn2 = conn.restore("s", ids)  # turn 2: the first 25 restored, 15 more computed
        assert turn2.tokens == 25 and turn2.tier == TIERS[ssd_only] and not turn2.converted
        more = model.forward([(torch.tensor(ids[25:]), turn2.cache)], want_hidden6=True)[0]
        conn.save("s", ids, turn2.cache, [more.hidden6], turn2)  # appends tokens 25..39
        again = conn.restore("s", ids + [7])
        assert again.tokens == 40 and again.tier == TIERS[ssd_only]
        stored = store.read("s")
        assert stored.dtype == common_pb2.KV_DTYPE_BFLOAT16
        if fmt == KV:
            assert bytes(stored.data) == kv_codec.to_bytes(turn2.cache.to_token_major(0, 40))
            assert torch.equal(bits(again.cache.to_token_major(0, 40)),
                               bits(turn2.cache.to_token_major(0, 40)))
        else:
            hidden6 = torch.cat([first.hidden6, more.hidden6])
            assert bytes(stored.data) == kv_codec.to_bytes(hidden6)
            converted = kv_codec.kv_from_bytes(model, T6, bytes(stored.data), torch.bfloat16)
            assert torch.equal(bits(again.cache.to_token_major(0, 40)),
                               bits(kv_to_token_major(converted)))  # the same bytes -> K/V


def test_exactness_helpers():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert user_messages(4, 1, 3) == user_messages(4, 1, 3) != user_messages(4, 2, 3)
    assert len(user_messages(0, 0, 3)) == 3


def test_fp32_restored_answers_equal_recompute_in_every_conversation(smollm):
    model, tok = smollm
    with local_store() as store:
        report = run_exactness(model, tok, store, conversations=2, max_tokens=8)
    assert report.dtype == "float32" and report.restored_tokens > 100
    assert (report.matched, report.divergences) == (2, [])


def test_bf16_restored_answers_equal_recompute_in_every_conversation(smollm_bf16):
    # Without blocks, conversation 2 of these first differed at turn 2, token 5.
    model, tok = smollm_bf16
    with local_store() as store:
        report = run_exactness(model, tok, store, conversations=3, max_tokens=8)
    assert report.dtype == "bfloat16" and report.restored_tokens >= 3 * 32
    assert report.restored_tokens % 32 == 0  # whole blocks only
    assert (report.matched, report.divergences) == (3, [])
