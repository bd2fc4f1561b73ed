"""The scheduler's `--max-tokens-limit` (real scheduler, real worker process): a larger
max_tokens or min_tokens is refused naming the field, a smaller one is kept, and a turn that
sets none is bounded by it too. The worker's own default is the context's end, so without this
an operator's bound held only for clients that chose to send max_tokens."""
from __future__ import annotations

import grpc
import pytest

from scheduler.config import SchedulerConfig
from scheduler.main import start as start_scheduler
from services.runtime.gen import common_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from tests.cluster import ServiceProcess

LIMIT = 5


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    worker = ServiceProcess("worker", tmp_path_factory.mktemp("limit"), "--store", "").wait()
    server, service = start_scheduler(SchedulerConfig(
        listen="127.0.0.1:0", store="", workers=[worker.target], max_tokens_limit=LIMIT))
    yield scheduler_pb2_grpc.SchedulerStub(channel(f"127.0.0.1:{server.port}"))
    server.stop(0)
    service.stop()
    worker.stop()


def _answer(stub, **fields) -> tuple[int, str]:
    """(tokens generated, finish reason) of one turn."""
    turn = common_pb2.TurnRequest(prompt_token_ids=list(range(100, 140)), ignore_eos=True,
                                  **fields)
    tokens, finish = 0, ""
    for event in stub.SubmitTurn(turn, timeout=120):
        tokens += len(event.token_ids)
        finish = event.summary.finish_reason or finish
    return tokens, finish


def test_a_turn_without_max_tokens_is_bounded_by_the_limit(scheduler):
    assert _answer(scheduler, session_id="unset") == (LIMIT, "length")
    assert _answer(scheduler, session_id="unset-min", min_tokens=3) == (LIMIT, "length")


def test_a_smaller_max_tokens_is_kept_and_a_larger_refused(scheduler):
    assert _answer(scheduler, session_id="small", max_tokens=2) == (2, "length")
    for field in ("max_tokens", "min_tokens"):
        with pytest.raises(grpc.RpcError) as refused:
            _answer(scheduler, session_id="large", **{field: LIMIT + 1})
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == f"{field} {LIMIT + 1} exceeds the limit {LIMIT}"
