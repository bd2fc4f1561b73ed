"""Block-aligned KV (compute_worker/models/kv_blocks.py): in bf16 the KV of a conversation's
whole blocks is the same bits however its prefix was cut (a prompt, token-by-token decodes, the
next prompt) as in one recompute; without blocks it is not (so the test can fail)."""
from __future__ import annotations

import contextlib

import pytest
import torch

from compute_worker.engine import Engine
from compute_worker.loaders.row_probe import rows_invariant
from compute_worker.models.kv_blocks import BLOCK, kv_block, whole_blocks
from compute_worker.sampling import Sampler
from compute_worker.sequence import DONE, Sequence


def test_the_rule_blocks_every_format_that_rounds_to_bf16():
    assert kv_block(torch.float32, "dense") == 0  # exact as it is
    assert kv_block(torch.bfloat16, "dense") == BLOCK
    assert kv_block(torch.float16, "dense") == BLOCK
    for weights in ("bf16", "int8", "int4"):
        assert kv_block(torch.float32, weights) == BLOCK
    assert [whole_blocks(n, 64) for n in (0, 63, 64, 130)] == [0, 0, 64, 128]
    assert whole_blocks(130, 0) == 130


class _Cache:
    def __init__(self, length: int):
        self.length = length

    def truncate(self, n: int) -> None:
        self.length = n


def _seq(prompt, pending, cache_len, block=4) -> Sequence:
    return Sequence("s", prompt, _Cache(cache_len), pending, Sampler(), None, 99, set(), [],
                    0.0, block=block)


def test_a_chunk_that_leaves_prompt_behind_ends_on_a_block_edge():
    seq = _seq(list(range(20)), list(range(20)), 0)
    assert seq.next_input(10) == list(range(8))  # 10 -> 8, a multiple of 4
    assert seq.next_input(3) == list(range(4))  # at least one block
    assert seq.next_input(50) == list(range(20))  # the last chunk ends with the prompt
    assert _seq(list(range(20)), list(range(20)), 0, block=0).next_input(10) == list(range(10))


def test_the_decode_that_completes_a_block_feeds_the_block_again():
    seq = _seq([1, 2, 3, 4, 5], [], 5)
    seq.generated = [6]  # cache holds 5 tokens; feeding 6 makes 6 positions: no edge
    assert seq.next_input(512) == [6] and seq.cache.length == 5
    seq.cache.length, seq.generated = 7, [6, 7, 8]  # feeding 8 fills positions 0..7
    assert seq.next_input(512) == [5, 6, 7, 8] and seq.cache.length == 4
    seq.hidden6 = [torch.zeros(5, 1, 1), torch.ones(1, 1, 1), torch.ones(1, 1, 1)]
    seq.fed(4, torch.full((4, 1, 1), 2.0))  # the 3 provisional rows go, the block's 4 come
    assert [t.shape[0] for t in seq.hidden6] == [4, 4]


def _decode(model, prompt: list[int], new: int, *others: list[int]) -> Sequence:
    """Run a greedy turn through the real engine, beside turns of `others` prompts; the
    finished Sequence of the first (cache kept)."""
    engine = Engine(model, max_batch=1 + len(others))
    try:
        seqs = [Sequence("s", p, model.new_cache(len(p) + new), list(p), Sampler(), _NoText(),
                         new, set(), [], 0.0, block=model.kv_block) for p in (prompt, *others)]
        for seq in seqs:
            engine.add(seq)
        for seq in seqs:
            while seq.out.get(timeout=120) is not DONE:
                pass
            assert seq.error is None
        return seqs[0]
    finally:
        engine.stop()


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(100, 40000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


class _NoText:
    text = ""

    def add(self, token: int) -> str:
        return ""


@contextlib.contextmanager
def _blocks(model, block):
    before, model.block_override = model.block_override, block
    try:
        yield
    finally:
        model.block_override = before


def _kv_after_turns(model) -> tuple[torch.Tensor, torch.Tensor, int]:
    """K/V of a 40-token prompt and its 30 decoded tokens (block 32..63 is completed by a
    decode), as the turn computed them and as one prefill recomputes them; and how many
    positions are whole blocks."""
    prompt = _ids(40, 3)
    seq = _decode(model, prompt, 30)
    history = (prompt + seq.generated)[:seq.cache.length]
    again = model.new_cache(len(history))
    model.forward([(torch.tensor(history), again)], logits_last_only=True)
    n = whole_blocks(len(history), BLOCK)
    return seq.cache.to_token_major(0, n), again.to_token_major(0, n), n


@pytest.mark.parametrize("blocked", [True, False], ids=["blocks", "no-blocks"])
def test_bf16_whole_blocks_equal_a_recompute_bit_for_bit(smollm_bf16, blocked):
    model, _ = smollm_bf16
    with _blocks(model, BLOCK if blocked else 0):
        turn, recomputed, n = _kv_after_turns(model)
    assert n >= 2 * BLOCK
    same = torch.equal(turn.view(torch.int16), recomputed.view(torch.int16))
    assert same == blocked  # without blocks the cut shows in bf16's last bits


def test_bf16_a_turn_is_the_same_beside_other_turns(smollm_bf16):
    # Rows of a batch do not mix: the linears give a row its bits whatever rows run beside it
    # and attention is per sequence, so batching does not change a bf16 answer or its KV.
    model, _ = smollm_bf16
    prompt = _ids(40, 4)
    alone = _decode(model, prompt, 26)
    beside = _decode(model, prompt, 26, _ids(70, 5), _ids(7, 6))
    assert alone.generated == beside.generated
    n = whole_blocks(alone.cache.length, BLOCK)
    assert torch.equal(alone.cache.to_token_major(0, n).view(torch.int16),
                       beside.cache.to_token_major(0, n).view(torch.int16))


def test_the_row_probe_tells_row_wise_from_batch_dependent():
    x = torch.randn(112, 8, generator=torch.Generator().manual_seed(1))
    assert rows_invariant(lambda rows: rows * 2 + 1, x)
    assert not rows_invariant(lambda rows: rows - rows.mean(0), x)  # a row sees its neighbours
    assert not rows_invariant(lambda rows: rows * len(rows), x)
