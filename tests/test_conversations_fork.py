"""A branch restores from its parent's KV and saves its own whole KV (K/V and tensor 6 alike):
every answer equals a recompute, and the branch's next turn reuses all it has (real store)."""
from __future__ import annotations

import pytest
import torch

from compute_worker.engine import Engine
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from services.runtime.gen import common_pb2
from tests.test_engine_batching import answer, opt_model, store, turn  # noqa: F401 (fixtures)

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6


def branch(session, parent, ids, max_tokens=12):
    request = turn(session, ids, max_tokens=max_tokens)
    request.parent_session_id = parent
    return request


@pytest.mark.parametrize("fmt", [T6, KV], ids=["tensor6", "kv"])
def test_branch_reuses_the_parent_prefix_then_its_own_whole_kv(opt_model, store, fmt):  # noqa: F811
    engine = TurnRunner(Engine(opt_model), make_connector(store, opt_model, f"opt-{fmt}", fmt), None)
    recompute = TurnRunner(Engine(opt_model), make_connector(None, opt_model, "opt", fmt), None)
    gen = torch.Generator().manual_seed(7)
    history = torch.randint(3, 512, (50,), generator=gen).tolist()
    other = torch.randint(3, 512, (8,), generator=gen).tolist()
    more = torch.randint(3, 512, (6,), generator=gen).tolist()
    parent_answer, _ = answer(engine, turn(f"p{fmt}", history))

    # Same beginning, then a different last message: the branch reads the parent's 40 tokens.
    forked = history[:40] + other
    ids, summary = answer(engine, branch(f"b{fmt}", f"p{fmt}", forked))
    assert summary.cached_tokens == 40 and summary.kv_format == fmt
    assert ids == answer(recompute, turn("r", forked))[0]

    # The branch's own next turn (no parent): its whole KV was saved, prefix included.
    follow = forked + ids + more
    ids2, summary2 = answer(engine, turn(f"b{fmt}", follow))
    assert summary2.cached_tokens == len(forked) + len(ids) - 1
    assert ids2 == answer(recompute, turn("r", follow))[0]

    # The parent kept its own tail.
    parent_follow = history + parent_answer + more
    ids3, summary3 = answer(engine, turn(f"p{fmt}", parent_follow))
    assert summary3.cached_tokens == len(history) + len(parent_answer) - 1
    assert ids3 == answer(recompute, turn("r", parent_follow))[0]


def test_a_session_prefers_whichever_kv_matches_more(opt_model, store):  # noqa: F811
    engine = TurnRunner(Engine(opt_model), make_connector(store, opt_model, "opt", T6), None)
    gen = torch.Generator().manual_seed(8)
    base = torch.randint(3, 512, (30,), generator=gen).tolist()
    answer(engine, turn("long", base + [5] * 20))
    answer(engine, turn("short", base[:10] + [6] * 5))
    # own KV matches 10 tokens, the parent's 30: the parent's wins
    _, summary = answer(engine, branch("short", "long", base + [7, 8]))
    assert summary.cached_tokens == 30
    # own KV (now base + [7, 8] + answer) matches more than the parent's: its own wins
    _, summary = answer(engine, branch("short", "long", base + [7, 8, 9]))
    assert summary.cached_tokens == 32
    # a parent with no KV at all is no obstacle
    _, summary = answer(engine, branch("fresh", "missing", base[:12]))
    assert summary.cached_tokens == 0
