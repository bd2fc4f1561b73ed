"""The worker's prompt logprobs in-process (compute_worker/prompt_logprobs.py): across prefill
chunks and the 64-row pieces the logits are made in, every prompt position once, equal to
log_softmax of one reference forward pass; a prompt-only turn ends with its prompt computed."""
from __future__ import annotations

import pytest
import torch

from compute_worker.engine import Engine
from compute_worker.prompt_logprobs import CHUNK
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from compute_worker.turn_summary import PromptCounts
from services.runtime.gen import common_pb2


@pytest.fixture(scope="module")
def runner(smollm):
    model, tok = smollm
    engine = Engine(model, max_prefill_tokens=100)  # chunks of 100: pieces of 64 and 36
    yield TurnRunner(engine, make_connector(None, model, "m", common_pb2.KV_FORMAT_KV), tok)
    engine.stop()


def test_prompt_logprobs_cover_every_position_across_chunks(runner, smollm):
    model, tok = smollm
    ids = tok.encode(" ".join(f"Step {i}: add one to the counter." for i in range(30)))[:230]
    assert len(ids) == 230 > 2 * CHUNK
    turn = common_pb2.TurnRequest(session_id="p", prompt_token_ids=ids, max_tokens=2,
                                  prompt_logprobs=True, top_logprobs=3)
    counts, *events = list(runner.run(turn))
    assert counts[2] == PromptCounts(prompt_tokens=230, cached_tokens=0)  # before the rest
    parts = [extra for _, _, extra in events if hasattr(extra, "steps")]
    assert all(hasattr(e[2], "steps") for e in events[:len(parts)])  # before the answer
    got = {p.start + k: s for p in parts for k, s in enumerate(p.steps)}
    assert sorted(got) == list(range(len(ids)))  # each position once
    assert got[0].token == ids[0] and got[0].top == []
    with torch.no_grad():
        logits = model.forward([(torch.tensor(ids), model.new_cache(len(ids) + 1))],
                               logits_last_only=False)[0].logits.float()
    ref = torch.log_softmax(logits[:-1], dim=-1)
    want = ref[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    assert max(abs(got[p].logprob - float(want[p - 1])) for p in got if p) < 1e-4
    for p in (1, CHUNK, CHUNK + 1, 100, 101, len(ids) - 1):
        values, alternatives = torch.topk(ref[p - 1], 3)
        assert [t for t, _ in got[p].top] == alternatives.tolist()
        assert [v for _, v in got[p].top] == pytest.approx(values.tolist(), abs=1e-4)
    assert events[-1][2].completion_tokens == 2


def test_a_prompt_only_turn_gives_no_answer(runner, smollm):
    _, tok = smollm
    turn = common_pb2.TurnRequest(session_id="q", prompt_token_ids=tok.encode("Hello there"),
                                  prompt_only=True)
    counts, (ids, text, summary) = list(runner.run(turn))
    assert counts[2] == PromptCounts(len(turn.prompt_token_ids), 0) and (ids, text) == ([], "")
    assert summary.completion_tokens == 0 and summary.finish_reason == "length"


def test_prompt_only_with_an_answer_length_is_refused_by_scheduler_and_worker():
    from compute_worker.service import check_request
    from scheduler.validation import turn_problem
    from services.runtime.gen import compute_worker_pb2
    from services.runtime.rpc_errors import BadRequest

    for extra in ({"max_tokens": 3}, {"min_tokens": 1}):
        turn = common_pb2.TurnRequest(session_id="s", raw_prompt="x", prompt_only=True, **extra)
        assert turn_problem(turn, 0).startswith("prompt_only")
        with pytest.raises(BadRequest, match="turn.prompt_only"):
            check_request(compute_worker_pb2.WorkerTurnRequest(turn=turn))
    ok = common_pb2.TurnRequest(session_id="s", raw_prompt="x", prompt_only=True,
                                prompt_logprobs=True, top_logprobs=20)
    assert turn_problem(ok, 0) is None
