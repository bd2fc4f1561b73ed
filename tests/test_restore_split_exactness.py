"""Correctness of the load-or-recompute choices on the worker, with the real model and a real
store on SSD: an answer from a prefix of the stored KV loaded + the rest of the history
recomputed (SPLIT), from the history's beginning recomputed in the engine's batch while the
store reads the rest (SPLIT_REVERSED; tensor 6 rotated from position k), and from a recompute
the scheduler chose (RECOMPUTE), equals a full recompute token for token (greedy, fp32), in both
stored formats; a split reads only the records of its prefix (or from the one holding its
start) from the SSD, a recompute reads nothing, a reversed split that finds nothing to read
past its start recomputes the rest, and what every choice saved is right."""
from __future__ import annotations

import pytest

from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6
QUESTIONS = ["List three colours of the rainbow.", "Which of them is the warmest?",
             "Name a fruit of that colour."]


@pytest.fixture
def ssd_store(tmp_path):
    """A store without DRAM: every read comes from the SSD."""
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=0))
    yield KVClient(f"127.0.0.1:{server.port}"), core
    server.stop(0)
    core.close()


def _turn(session, messages, max_tokens=8):
    return common_pb2.TurnRequest(session_id=session, max_tokens=max_tokens, messages=[
        common_pb2.ChatMessage(role=r, content=c) for r, c in messages])


def _run(runner, turn, limit=None, suffix_from=0):
    ids, summary = [], None
    for new_ids, _, s in runner.run(turn, kv_max_tokens=limit, kv_suffix_from=suffix_from):
        ids += new_ids
        summary = s or summary
    return ids, summary


@pytest.mark.parametrize("fmt", [KV, T6])
def test_split_and_recompute_choices_answer_as_a_full_recompute(smollm, ssd_store, fmt):
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
    stored = client.lookup("conv").token_ids
    final = _turn("conv", history + [("user", QUESTIONS[2])])
    want, _ = _run(fresh, final)
    assert len(want) == 8

    whole = core.stats()["ssd_bytes"]  # the one session's file
    for k in (first_record // 2, len(stored) - 5):  # inside the first record, the second
        before = core.stats()["ssd_bytes_read"]
        got, summary = _run(runner, final, limit=k)
        assert got == want, k  # token for token
        assert summary.cached_tokens == k and summary.kv_tier == common_pb2.TIER_SSD
        read = core.stats()["ssd_bytes_read"] - before
        assert read >= k * runner.connector.bytes_per_token
        if k == first_record // 2:  # the first record only, of the file the two turns wrote
            assert read < whole
    before = core.stats()["ssd_bytes_read"]
    got, summary = _run(runner, final, limit=0)  # RECOMPUTE: the store is not read
    assert got == want and summary.cached_tokens == 0
    assert summary.kv_tier == common_pb2.TIER_NONE
    assert core.stats()["ssd_bytes_read"] == before
    _reversed_splits(runner, core, final, want, len(stored), first_record)
    got, summary = _run(runner, final)  # and the KV every choice saved is still right
    assert got == want and summary.cached_tokens > len(stored)
    assert summary.recomputed_tokens == 0


def _reversed_splits(runner, core, final, want, stored: int, first_record: int) -> None:
    """SPLIT_REVERSED at k: [0, k) recomputed while [k, ...) is read. The saves above wrote
    the session's KV as records of their own (tensor 6 appends) or as one rewrite (K/V)."""
    bpt = runner.connector.bytes_per_token
    for k in (stored - 5, first_record // 2):  # near the end, inside the first record
        before = core.stats()["ssd_bytes_read"]
        got, summary = _run(runner, final, suffix_from=k)
        assert got == want, k  # token for token
        assert summary.recomputed_tokens == k and summary.kv_tier == common_pb2.TIER_SSD
        assert stored - k <= summary.cached_tokens < summary.prompt_tokens - k
        read = core.stats()["ssd_bytes_read"] - before
        assert read >= summary.cached_tokens * bpt
        if k == first_record // 2:  # the file's first record holds token k: read from it
            assert read >= (stored - k) * bpt
    last = summary.prompt_tokens - 1  # the last prompt token is always computed
    before = core.stats()["ssd_bytes_read"]
    got, summary = _run(runner, final, suffix_from=last)  # nothing to read past it
    assert got == want and summary.cached_tokens == 0 and summary.recomputed_tokens == last
    assert core.stats()["ssd_bytes_read"] == before
