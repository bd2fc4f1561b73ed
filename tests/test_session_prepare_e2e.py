"""A client says its conversation's next turn is coming (POST /v1/sessions/{id}/prepare) through
a live deployment (real processes, the real model, greedy): KV that went to SSD is promoted to
DRAM before the turn, the turn reads it from DRAM and answers as a recompute does; the prepare
answers at once, is idempotent, stays inside its tenant, and the scheduler's RPC needs the
cluster token."""
from __future__ import annotations

import re
import time
import urllib.request

import grpc
import pytest

from services.client.chat_client import ChatClient
from services.client.http_chat_client import HttpChatClient
from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2, \
    scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from tests.test_conversations_e2e import (MODEL, QUESTIONS, client, converse, recompute,
                                          two_tenants)  # noqa: F401 (two_tenants: a fixture)
from tests.test_session_end_e2e import session_call, store_tier

FILLER = "Please list, one by one, every colour of the rainbow, and say why each one matters."


@pytest.fixture(scope="module")
def lru_deployment(deployment, tmp_path_factory):
    """A deployment of its own, 4 MiB of DRAM (~91 tokens of SmolLM2 KV) evicted LRU, so one
    newer conversation surely pushes an older one to SSD (the shared deployment's policy ranks
    by what other tests taught it). After `deployment`: it shares that one's cluster token."""
    from services.launch.launcher import LocalDeployment

    with LocalDeployment(data_dir=str(tmp_path_factory.mktemp("prepare")), dram_bytes="4MiB",
                         eviction="lru", default_max_tokens=32, supervise=False) as dep:
        yield dep


def prepare(base_url: str, session: str, key: str | None = None) -> tuple[int, dict]:
    """POST {base_url}/sessions/{session}/prepare (base_url ends in /v1): (status, JSON body)."""
    return session_call("POST", f"{base_url}/sessions/{session}/prepare", key)


def wait_tier(deployment, scoped: str, tier: int, timeout: float = 30.0) -> int:
    """The session's tier once it is `tier`, or the tier it had at the deadline."""
    deadline = time.monotonic() + timeout
    while (now := store_tier(deployment, scoped)) != tier and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def writes_done(deployment, timeout: float = 30.0) -> bool:
    """Whether the store's SSD writes have all landed (within `timeout`): KV still being written
    cannot be evicted, so until then no room can be made for a promotion."""
    deadline = time.monotonic() + timeout
    with channel(deployment.store_target) as ch:
        stub = kv_store_pb2_grpc.KVStoreStub(ch)
        while stub.Stats(kv_store_pb2.StoreStatsRequest()).ssd_writes_pending:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    return True


def test_a_prepared_session_comes_back_from_ssd_to_dram_before_its_turn(lru_deployment):
    dep = lru_deployment
    c = client(dep.gateway_url)
    turns, messages = converse(c, "warm-me", QUESTIONS[:2], session="warm-me")
    scoped = "default/warm-me"
    assert wait_tier(dep, scoped, common_pb2.TIER_DRAM) == common_pb2.TIER_DRAM  # saved
    # a newer conversation that cannot share 4 MiB with ours: LRU sends ours to SSD
    converse(c, "filler", [FILLER], session="filler")
    assert wait_tier(dep, scoped, common_pb2.TIER_SSD) == common_pb2.TIER_SSD
    assert writes_done(dep)  # the filler's KV can make room (a loaded CI machine lags here)

    status, body = prepare(dep.gateway_url, "warm-me")
    assert (status, body) == (202, {"id": "warm-me", "object": "session.prepare",
                                    "kv_tier": "loading"})  # started: it was on SSD
    assert wait_tier(dep, scoped, common_pb2.TIER_DRAM) == common_pb2.TIER_DRAM
    assert HttpChatClient(dep.gateway_url).prepare("warm-me") == "dram"  # nothing more to do
    grpc_client = ChatClient(dep.scheduler_target)
    assert grpc_client.prepare(scoped) == "dram"  # the scheduler's own client says the same
    grpc_client.close()

    messages.append({"role": "user", "content": QUESTIONS[2]})
    reply = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                      temperature=0, extra_headers={"X-Session-Id": "warm-me"})
    assert reply.model_extra["bidaw"]["kv_tier"] == "dram"  # the turn found it promoted
    stored = turns[1][1].prompt_tokens + turns[1][1].completion_tokens - 1
    assert reply.usage.prompt_tokens_details.cached_tokens == stored
    assert reply.choices[0].message.content == recompute(c, messages)
    assert prepare(dep.gateway_url, "never-seen-here")[0] == 404


def test_prepares_are_counted_by_outcome(lru_deployment):
    def counts() -> dict[str, float]:
        text = urllib.request.urlopen(lru_deployment.metrics_urls["scheduler"], timeout=10).read()
        return {m[0]: float(m[1]) for m in re.findall(
            r'^bidaw_scheduler_session_prepares_total\{outcome="(\w+)"\} (\S+)$',
            text.decode(), re.M)}

    before = counts()
    converse(client(lru_deployment.gateway_url), "counted", QUESTIONS[:1], session="counted")
    assert wait_tier(lru_deployment, "default/counted", common_pb2.TIER_DRAM) == \
        common_pb2.TIER_DRAM
    assert prepare(lru_deployment.gateway_url, "counted")[1]["kv_tier"] == "dram"
    assert prepare(lru_deployment.gateway_url, "not-a-session")[0] == 404
    after = counts()
    assert after["in_dram"] - before.get("in_dram", 0) == 1
    assert after["unknown"] - before.get("unknown", 0) == 1


def test_only_its_own_tenant_can_prepare_a_conversation(deployment, two_tenants):
    carol = client(two_tenants.url, "key-carol-123")
    turns, _ = converse(carol, "prepared", QUESTIONS[:1])
    session = turns[0][2]
    assert wait_tier(deployment, f"carol/{session}", common_pb2.TIER_DRAM, 10) != \
        common_pb2.TIER_NONE  # saved (in DRAM, or on SSD already)
    assert prepare(two_tenants.url, session)[0] == 401                    # no key
    status, body = prepare(two_tenants.url, session, "key-dave-456")      # another tenant's
    assert status == 404 and body["error"]["code"] == "session_not_found", body
    status, body = prepare(two_tenants.url, session, "key-carol-123")
    assert status == 202 and body["kv_tier"] in ("dram", "loading")


def test_prepare_session_over_grpc_needs_the_cluster_token(deployment):
    request = scheduler_pb2.PrepareSessionRequest(session_id="default/anything")
    with channel(deployment.scheduler_target, token=None) as ch:  # an outsider's channel
        with pytest.raises(grpc.RpcError) as err:
            scheduler_pb2_grpc.SchedulerStub(ch).PrepareSession(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with channel(deployment.scheduler_target) as ch:  # with it: answered (nothing known)
        reply = scheduler_pb2_grpc.SchedulerStub(ch).PrepareSession(request, timeout=10)
    assert (reply.known, reply.tier) == (False, common_pb2.TIER_NONE)
