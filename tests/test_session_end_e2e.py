"""A client ends its conversation (DELETE /v1/sessions/{id}) through the live deployment (real
processes, the real model, greedy): the KV goes from the store's DRAM and SSD, the conversation
index forgets it, the next turn of the same history starts afresh and answers as a recompute
does; other tenants cannot end it; bad ids are refused with a JSON error."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc
from services.runtime.grpc_util import channel
from tests.test_conversations_e2e import (QUESTIONS, chat, client, converse, recompute,
                                          two_tenants)  # noqa: F401 (two_tenants: a fixture)


def delete(base_url: str, session: str, key: str | None = None) -> tuple[int, dict]:
    """DELETE {base_url}/sessions/{session} (base_url ends in /v1): (status, JSON body)."""
    return session_call("DELETE", f"{base_url}/sessions/{session}", key)


def session_call(method: str, url: str, key: str | None = None) -> tuple[int, dict]:
    """`method` `url` with the caller's key, if any: (status, JSON body)."""
    req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def store_tier(deployment, scoped: str) -> int:
    with channel(deployment.store_target) as ch:
        return kv_store_pb2_grpc.KVStoreStub(ch).Lookup(
            kv_store_pb2.LookupRequest(session_id=scoped)).tier


def wait_gone(deployment, scoped: str, timeout: float = 10.0) -> int:
    """The session's tier once the store has dropped it, or the tier it kept at the deadline."""
    deadline = time.monotonic() + timeout
    while (tier := store_tier(deployment, scoped)) != common_pb2.TIER_NONE \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    return tier


def test_a_plain_client_ends_its_conversation_and_its_kv_is_freed(deployment):
    c = client(deployment.gateway_url)
    turns, messages = converse(c, "ending", QUESTIONS[:2])
    session = turns[0][2]
    assert session.startswith("c-") and turns[1][3] == "content"
    scoped = f"default/{session}"
    assert store_tier(deployment, scoped) != common_pb2.TIER_NONE
    files_before = {p.name for p in deployment_ssd_files(deployment)}
    assert any(files_before)

    status, body = delete(deployment.gateway_url, session)
    assert (status, body) == (200, {"id": session, "object": "session.deleted", "deleted": True})
    # gone when the client hears so (the store said so before the 200), not some time after
    assert store_tier(deployment, scoped) == common_pb2.TIER_NONE
    assert len({p.name for p in deployment_ssd_files(deployment)}) < len(files_before)

    # the same history again: not recognised, nothing cached, the answer of a recompute
    messages.append({"role": "user", "content": QUESTIONS[2]})
    answer, usage, again, how = chat(c, messages)
    assert how == "new" and again != session
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert answer == recompute(c, messages)
    assert delete(deployment.gateway_url, session)[0] == 404  # ended already


def deployment_ssd_files(deployment):
    import pathlib

    return list((pathlib.Path(deployment.store_data_dir) / "sessions").glob("*/*.kv"))


def test_a_named_session_ends_and_the_name_starts_afresh(deployment):
    c = client(deployment.gateway_url)
    first, messages = converse(c, "named-end", QUESTIONS[:2], session="ends-here")
    assert first[1][1].prompt_tokens_details.cached_tokens > 0
    assert delete(deployment.gateway_url, "ends-here")[0] == 200
    assert store_tier(deployment, "default/ends-here") == common_pb2.TIER_NONE
    messages.append({"role": "user", "content": QUESTIONS[2]})
    answer, usage, named, how = chat(c, messages, session="ends-here")
    assert (named, how) == ("ends-here", "id")
    assert usage.prompt_tokens_details.cached_tokens == 0   # its KV went with the end
    assert answer == recompute(c, messages)
    messages += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": QUESTIONS[3]}]
    _, usage, _, _ = chat(c, messages, session="ends-here")  # the name goes on afresh
    assert usage.prompt_tokens_details.cached_tokens > 0


def test_only_its_own_tenant_can_end_a_conversation(deployment, two_tenants):
    carol = client(two_tenants.url, "key-carol-123")
    turns, _ = converse(carol, "owned", QUESTIONS[:1])
    session = turns[0][2]
    assert delete(two_tenants.url, session)[0] == 401                    # no key
    assert delete(two_tenants.url, session, "wrong-key")[0] == 401
    status, body = delete(two_tenants.url, session, "key-dave-456")      # another tenant's
    assert status == 404 and body["error"]["code"] == "session_not_found"
    assert store_tier(deployment, f"carol/{session}") != common_pb2.TIER_NONE
    assert delete(two_tenants.url, session, "key-carol-123")[0] == 200
    assert wait_gone(deployment, f"carol/{session}") == common_pb2.TIER_NONE


def test_a_named_id_with_a_slash_ends_too(deployment):
    c = client(deployment.gateway_url)
    converse(c, "slashed", QUESTIONS[:1], session="team/chat 7")
    assert store_tier(deployment, "default/team/chat 7") != common_pb2.TIER_NONE
    assert delete(deployment.gateway_url, "team%2Fchat%207")[0] == 200
    assert wait_gone(deployment, "default/team/chat 7") == common_pb2.TIER_NONE


def test_the_scheduler_counts_ends_by_outcome(deployment):
    import re

    def counts() -> dict[str, float]:
        text = urllib.request.urlopen(deployment.metrics_urls["scheduler"], timeout=10).read()
        return {m[0]: float(m[1]) for m in re.findall(
            r'^bidaw_scheduler_session_ends_total\{outcome="(\w+)"\} (\S+)$', text.decode(), re.M)}

    before = counts()
    converse(client(deployment.gateway_url), "counted", QUESTIONS[:1], session="counted-end")
    assert delete(deployment.gateway_url, "counted-end")[0] == 200
    assert wait_gone(deployment, "default/counted-end") == common_pb2.TIER_NONE
    assert delete(deployment.gateway_url, "counted-end")[0] == 404
    after = counts()
    assert after["ended"] - before.get("ended", 0) == 1
    assert after["unknown"] - before.get("unknown", 0) == 1


@pytest.mark.parametrize("path, status, code", [
    ("/sessions/never-seen-" + "x" * 8, 404, "session_not_found"),
    ("/sessions/" + "s" * 200, 400, "invalid_value"),        # over --max-session-id (128)
    ("/sessions/a%01b", 400, "invalid_value"),               # not printable
    ("/sessions/", 404, "not_found"),
])
def test_bad_session_ids_are_refused_with_a_json_error(deployment, path, status, code):
    req = urllib.request.Request(deployment.gateway_url + path, method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    body = json.loads(err.value.read())
    assert err.value.code == status and body["error"]["code"] == code, body


def test_get_on_a_session_is_not_allowed(deployment):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(deployment.gateway_url + "/sessions/x", timeout=30)
    assert err.value.code == 405 and json.loads(err.value.read())["error"]["code"] == \
        "method_not_allowed"


@pytest.mark.parametrize("tenant, session, words", [
    ("", "", "session_id is empty"),
    ("bad tenant", "bad tenant/x", "tenant must match"),
    ("erin", "fred/c-1", "not in tenant erin's namespace"),
    ("erin", "erin/" + "s" * 300, "longer than"),
])
@pytest.mark.parametrize("rpc", ["EndSession", "PrepareSession"])
def test_session_rpcs_refuse_what_names_no_session_of_its_tenant(
        deployment, rpc, tenant, session, words):
    import grpc

    from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc

    request = getattr(scheduler_pb2, rpc + "Request")(tenant=tenant, session_id=session)
    with channel(deployment.scheduler_target) as ch:
        with pytest.raises(grpc.RpcError) as err:
            getattr(scheduler_pb2_grpc.SchedulerStub(ch), rpc)(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in err.value.details()


def test_an_end_during_a_turn_waits_for_it_then_frees_what_it_saved(deployment):
    import threading

    c = client(deployment.gateway_url)
    messages = [{"role": "user", "content": "Count from one to forty in words."}]
    stream = c.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=32,
                                       temperature=0, stream=True,
                                       extra_headers={"X-Session-Id": "mid-turn"})
    first = next(iter(stream))                        # the turn is running
    assert first.choices
    ended = {}
    t = threading.Thread(target=lambda: ended.update(
        reply=delete(deployment.gateway_url, "mid-turn"), at=time.monotonic()))
    t.start()
    list(stream)                                      # the turn runs to its end
    streamed_until = time.monotonic()
    t.join(60)
    assert ended["reply"][0] == 200 and ended["at"] >= streamed_until - 0.5
    assert wait_gone(deployment, "default/mid-turn") == common_pb2.TIER_NONE
