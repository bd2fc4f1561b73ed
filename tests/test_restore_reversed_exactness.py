"""Correctness of the reversed load-or-recompute split on the worker, with the real model and a
real store on SSD: the history's first k tokens recomputed (in the engine's batch) while the
store reads the KV of the rest, then the new tokens prefilled on all of it, answers as a full
recompute token for token (greedy, fp32), in both stored formats (tensor 6 is rotated from
position k); the store reads only the records from the one holding token k; a read that finds
nothing past k falls back to recomputing the rest; and what the turn saved is right."""
from __future__ import annotations

import pytest

from compute_worker.engine import Engine
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from services.runtime.gen import common_pb2
from tests.test_restore_split_exactness import KV, QUESTIONS, T6, _turn
from tests.test_restore_split_exactness import ssd_store  # noqa: F401 (a fixture)


def _run(runner, turn, suffix_from=0):
    ids, summary = [], None
    for new_ids, _, s in runner.run(turn, kv_suffix_from=suffix_from):
        ids += new_ids
        summary = s or summary
    return ids, summary


@pytest.mark.parametrize("fmt", [KV, T6])
def test_a_reversed_split_answers_as_a_full_recompute(smollm, ssd_store, fmt):  # noqa: F811
    model, tok = smollm
    client, core = ssd_store
    runner = TurnRunner(Engine(model), make_connector(client, model, "smol", fmt), tok)
    fresh = TurnRunner(Engine(model), make_connector(None, model, "smol", fmt), tok)
    history: list[tuple[str, str]] = []
    for q in QUESTIONS[:2]:  # two turns stored: two records on SSD
        history.append(("user", q))
        ids, _ = _run(runner, _turn("conv", history))
        history.append(("assistant", tok.decode(ids)))
    first_record = len(tok.apply_chat_template([{"role": "user", "content": QUESTIONS[0]}]))
    stored = len(client.lookup("conv").token_ids)
    final = _turn("conv", history + [("user", QUESTIONS[2])])
    want, _ = _run(fresh, final)
    assert len(want) == 8
    bpt = runner.connector.bytes_per_token

    whole = core.stats()["ssd_bytes"]
    # inside the second record (first: a K/V split's save rewrites the file as one record),
    # then inside the first
    for k in (stored - 5, first_record // 2):
        before = core.stats()["ssd_bytes_read"]
        got, summary = _run(runner, final, suffix_from=k)
        assert got == want, k  # token for token
        assert summary.recomputed_tokens == k and summary.kv_tier == common_pb2.TIER_SSD
        # all the stored match past k (the lookup above may not yet see the last write)
        assert stored - k <= summary.cached_tokens < summary.prompt_tokens - k
        read = core.stats()["ssd_bytes_read"] - before
        assert read >= (stored - k) * bpt
        if k > first_record:  # the second record only: not the first's bytes
            assert read < whole
    before = core.stats()["ssd_bytes_read"]
    last = summary.prompt_tokens - 1  # the last prompt token is always computed
    got, summary = _run(runner, final, suffix_from=last)  # nothing to read past it
    assert got == want and summary.cached_tokens == 0 and summary.recomputed_tokens == last
    assert core.stats()["ssd_bytes_read"] == before
    got, summary = _run(runner, final)  # and the KV every split saved is still right
    assert got == want and summary.cached_tokens > stored and summary.recomputed_tokens == 0
