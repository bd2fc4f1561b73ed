"""The length of an answer that sets no max_tokens: the worker's `--default-max-tokens` (1024,
raised to min_tokens; it was 256, which cut chat front-ends' answers), or with 0 until the model
ends it or the context is full, as in vLLM; an explicit max_tokens is clamped to the context. Through the worker's TurnRunner and a real forward pass
(a random-weight OPT whose context is 512 tokens, so that filling it is quick)."""
from __future__ import annotations

import pytest

from compute_worker.config import WorkerConfig
from compute_worker.engine import Engine
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from services.runtime.gen import common_pb2
from tests.test_engine_batching import opt_model  # noqa: F401 (fixture)

LEFT = 12  # context the prompt leaves


@pytest.fixture(scope="module")
def engine(opt_model):  # noqa: F811
    engine = Engine(opt_model)
    yield engine
    engine.stop()


def _answer(engine, default: int, **turn) -> tuple[int, str]:
    """(tokens generated, finish reason) of one turn whose prompt leaves LEFT tokens."""
    model = engine.model
    runner = TurnRunner(engine, make_connector(None, model, "len", common_pb2.KV_FORMAT_KV),
                        None, default_max_tokens=default)
    ids = [3 + i % 500 for i in range(model.config.max_position - LEFT)]
    request = common_pb2.TurnRequest(session_id="len", prompt_token_ids=ids, ignore_eos=True,
                                     **turn)
    tokens, last = 0, None
    for ids, _, last in runner.run(request):
        tokens += len(ids)
    return tokens, last.finish_reason


def test_the_worker_default_is_bounded_and_0_is_the_context():
    assert WorkerConfig().default_max_tokens == 1024  # a whole answer, not a CPU's 10 minutes
    WorkerConfig(default_max_tokens=0)  # accepted: 0 is "to the context's end"
    with pytest.raises(ValueError, match="--default-max-tokens must be >= 0, got -1"):
        WorkerConfig(default_max_tokens=-1)


@pytest.mark.parametrize("default, turn, want", [
    (0, {}, LEFT),  # the context's end
    (5, {}, 5),  # the operator's bound
    (5, {"min_tokens": 8}, 8),  # raised to min_tokens
    (0, {"max_tokens": 7}, 7),
    (5, {"max_tokens": 10_000}, LEFT),  # explicit, clamped to the context
])
def test_an_unset_answer_length_runs_to_the_context_unless_bounded(engine, default, turn, want):
    assert _answer(engine, default, **turn) == (want, "length")
