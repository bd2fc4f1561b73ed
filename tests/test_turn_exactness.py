"""Correctness of KV reuse: answers from KV restored out of DRAM, out of SSD, and from a full
recompute are identical token for token (greedy), with the real model and real stores."""
from __future__ import annotations

import pytest

from bench.exactness import answer_turn
from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

KV = common_pb2.KV_FORMAT_KV


@pytest.fixture
def stores(tmp_path):
    made = []
    for name, dram in (("dram", 1 << 30), ("ssd", 0)):
        server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / name),
                                         dram_bytes=dram))
        made.append((server, core))
    yield [KVClient(f"127.0.0.1:{s.port}") for s, _ in made]
    for server, core in made:
        server.stop(0)
        core.close()


def make_engine(model, tok, store, fmt=KV):
    return TurnRunner(Engine(model), make_connector(store, model, "smol", fmt), tok)


run_turn = answer_turn


def test_dram_ssd_and_recompute_answers_are_identical(smollm, stores):
    model, tok = smollm
    runners = {
        "dram": make_engine(model, tok, stores[0]),
        "ssd": make_engine(model, tok, stores[1]),
        "recompute": make_engine(model, tok, None),
    }
    q1 = "List three colours of the rainbow."
    q2 = "Which of them is the warmest, and why?"
    answers, tiers, cached = {}, {}, {}
    for name, runner in runners.items():
        ids1, text1, _ = run_turn(runner, "conv", [("user", q1)])
        history = [("user", q1), ("assistant", text1), ("user", q2)]
        ids2, _, summary = run_turn(runner, "conv", history)
        answers[name] = (ids1, ids2)
        tiers[name] = summary.kv_tier
        cached[name] = summary.cached_tokens
    assert tiers == {"dram": common_pb2.TIER_DRAM, "ssd": common_pb2.TIER_SSD,
                     "recompute": common_pb2.TIER_NONE}
    assert cached["dram"] > 20 and cached["dram"] == cached["ssd"] and cached["recompute"] == 0
    assert answers["dram"] == answers["recompute"]
    assert answers["ssd"] == answers["recompute"]


def test_edited_history_does_not_reuse_kv_past_the_edit(smollm, stores):
    model, tok = smollm
    runner = make_engine(model, tok, stores[0])
    fresh = make_engine(model, tok, None)
    _, text1, _ = run_turn(runner, "edit", [("user", "Say hello in French.")], max_tokens=8)
    edited = [("user", "Say hello in Spanish."), ("assistant", text1), ("user", "Thanks!")]
    ids, _, summary = run_turn(runner, "edit", edited, max_tokens=12)
    prefix = tok.apply_chat_template([{"role": "user", "content": "Say hello in French."}])
    edited_ids = tok.apply_chat_template([{"role": r, "content": c} for r, c in edited])
    diverge = next(i for i, (a, b) in enumerate(zip(prefix, edited_ids)) if a != b)
    assert summary.cached_tokens == diverge  # reuse stops exactly where the edit starts
    assert ids == run_turn(fresh, "edit", edited, max_tokens=12)[0]
