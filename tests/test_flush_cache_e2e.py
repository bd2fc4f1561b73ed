"""A benchmark's flush before it measures (SGLang's POST /flush_cache, vLLM's
/reset_prefix_cache), through the live deployment: every conversation of the caller's tenant
ends (its KV freed from DRAM and SSD, the index forgets it), and no other tenant's; the same
history sent again is computed afresh. It used to answer 200 and drop nothing, so a benchmark
that asked for a cold cache measured a warm one."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from tests.test_conversations_e2e import (QUESTIONS, chat, client, converse,  # noqa: F401
                                          two_tenants)


def flush(base: str, path: str = "/flush_cache", key: str | None = None) -> tuple[int, dict]:
    root = base.removesuffix("/v1")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(root + path, b"", headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_flush_ends_the_tenants_conversations_and_no_others(two_tenants):
    carol, dave = (client(two_tenants.url, k) for k in ("key-carol-123", "key-dave-456"))
    _, carol_history = converse(carol, "flush carol", QUESTIONS[:2])
    dave_turns, dave_history = converse(dave, "flush dave", QUESTIONS[:2])
    assert dave_turns[1][1].prompt_tokens_details.cached_tokens > 0
    status, got = flush(two_tenants.url, key="key-carol-123")
    assert status == 200 and got["flushed"] is True and got["sessions_ended"] >= 1, got
    carol_history.append({"role": "user", "content": QUESTIONS[2]})
    _, usage, _, how = chat(carol, carol_history)
    assert how == "new" and usage.prompt_tokens_details.cached_tokens == 0  # computed afresh
    dave_history.append({"role": "user", "content": QUESTIONS[2]})
    _, usage, _, how = chat(dave, dave_history)  # dave's KV and index entry are untouched
    assert how == "content" and usage.prompt_tokens_details.cached_tokens > 0
    status, got = flush(two_tenants.url, "/reset_prefix_cache", key="key-dave-456")
    assert status == 200 and got["sessions_ended"] >= 1
    assert flush(two_tenants.url)[0] == 401  # a tenant's key, as for every route


def test_a_named_session_is_flushed_too(deployment):
    c = client(deployment.gateway_url)
    turns, messages = converse(c, "flush named", QUESTIONS[:2], session="flush-named")
    assert turns[1][1].prompt_tokens_details.cached_tokens > 0
    assert flush(deployment.gateway_url)[0] == 200
    messages.append({"role": "user", "content": QUESTIONS[2]})
    _, usage, _, _ = chat(c, messages, "flush-named")
    assert usage.prompt_tokens_details.cached_tokens == 0


def test_the_scheduler_never_flushes_without_a_tenant(deployment):
    with channel(deployment.scheduler_target, token=deployment.cluster_token) as ch:
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        with pytest.raises(grpc.RpcError) as refused:
            stub.FlushSessions(scheduler_pb2.FlushSessionsRequest(tenant=""), timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as refused:
            stub.FlushSessions(scheduler_pb2.FlushSessionsRequest(tenant="a/b\x00"), timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
