"""The embedded deployment end to end: three processes over real gRPC, the real model."""
from __future__ import annotations

import time

import grpc
import pytest

from compute_worker.kv_client import KVClient
from services.client.chat_client import ChatClient, Conversation
from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2
from services.runtime.grpc_util import channel

LONG_SECOND_QUESTION = ("That is helpful. Now please describe, in a few sentences, what the "
                        "weather is usually like there in spring and in autumn, for a visitor.")


@pytest.fixture(scope="module")
def fresh_deployment(tmp_path_factory):
    """A deployment of its own: on the shared one, what other tests stored and taught the
    eviction policy (many one-turn sessions that never came back) decides where turn 1 lands."""
    from services.launch.launcher import LocalDeployment

    with LocalDeployment(data_dir=str(tmp_path_factory.mktemp("fresh")), dram_bytes="4MiB",
                         default_max_tokens=32, supervise=False) as dep:
        yield dep


def test_three_turns_served_from_none_dram_then_ssd(fresh_deployment):
    deployment = fresh_deployment
    conv = Conversation(ChatClient(deployment.scheduler_target), "three-turns")
    store = KVClient(deployment.store_target)
    r1 = conv.say("What is the capital of France?", max_tokens=32)
    assert store.lookup("three-turns").tier == common_pb2.TIER_DRAM
    r2 = conv.say(LONG_SECOND_QUESTION, max_tokens=32)
    after2 = store.lookup("three-turns")
    # 4 MiB of DRAM holds ~91 tokens of SmolLM2 KV: turn 2's history no longer fits.
    assert after2.tier == common_pb2.TIER_SSD
    r3 = conv.say("Thanks!", max_tokens=32)
    assert [r1.tier, r2.tier, r3.tier] == ["none", "dram", "ssd"]
    assert all(r.text for r in (r1, r2, r3))
    # Turn 3 reused everything stored and prefilled only its new tokens.
    stored = r2.summary.prompt_tokens + r2.summary.completion_tokens - 1
    assert after2.num_tokens == stored
    assert r3.summary.cached_tokens == stored
    assert r3.summary.prompt_tokens - r3.summary.cached_tokens < 15


def test_awareness_connects_scheduler_and_store(deployment):
    Conversation(ChatClient(deployment.scheduler_target), "aware").say("Hi!", max_tokens=4)
    with channel(deployment.scheduler_target) as ch:
        from services.runtime.gen import scheduler_pb2_grpc

        stats = scheduler_pb2_grpc.SchedulerStub(ch).Stats(scheduler_pb2.SchedulerStatsRequest())
    assert stats.awareness_connected and stats.turns_finished >= 1
    deadline = time.monotonic() + 5
    while stats.sessions_known == 0 and time.monotonic() < deadline:  # location events flow
        time.sleep(0.1)
    assert stats.sessions_known >= 1 and stats.workers == 1
    with channel(deployment.store_target) as ch:
        store_stats = kv_store_pb2_grpc.KVStoreStub(ch).Stats(kv_store_pb2.StoreStatsRequest())
    assert store_stats.answers_observed >= 1 and store_stats.arrivals_observed >= 1


@pytest.mark.parametrize("turn, message", [
    (dict(session_id="s" * 300, messages=[("user", "hi")]), "session_id"),  # "": recognised
    (dict(session_id="s", messages=[]), "empty"),
    (dict(session_id="s", messages=[("user", "")]), "empty"),
    (dict(session_id="s", messages=[("robot", "hi")]), "role"),
    (dict(session_id="s", messages=[("user", "hi")], temperature=-1.0), "temperature"),
    (dict(session_id="s", messages=[("user", "hi")], max_tokens=10**6), "max_tokens"),
    (dict(session_id="s", messages=[("user", "word " * 9000)]), "context"),
    (dict(session_id="s", prompt_token_ids=[1, -5]), "prompt_token_ids"),
])
def test_bad_turns_get_invalid_argument_and_service_keeps_serving(deployment, turn, message):
    client = ChatClient(deployment.scheduler_target)
    fields = dict(turn)
    messages = [common_pb2.ChatMessage(role=r, content=c) for r, c in fields.pop("messages", [])]
    request = common_pb2.TurnRequest(messages=messages, **fields)
    with pytest.raises(grpc.RpcError) as err:
        list(client.stub.SubmitTurn(request, timeout=120))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()
    ok = client.turn("after-bad-input", [{"role": "user", "content": "Hello"}], max_tokens=3)
    assert ok.summary.completion_tokens >= 1
