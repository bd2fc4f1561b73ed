"""The gateway's HTTP API against a fake scheduler: OpenAI mapping, sessions, errors, shedding."""
from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request

import openai
import pytest

from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from services.launch.launcher import free_port
from services.runtime.gen import scheduler_pb2_grpc
from services.runtime.grpc_util import Server
from tests.fake_scheduler import start_fake_scheduler

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def fake():
    server, fake = start_fake_scheduler()
    yield server, fake
    server.stop(0)


@pytest.fixture(scope="module")
def gateway(fake):
    server, _ = fake
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}",
                           max_in_flight=3, max_waiting=0, request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


def client(gw, key="none") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=key, max_retries=0, timeout=30)


def raw(gw, method: str, path: str, body: bytes | None = None,
        headers: dict | None = None) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json",
                                                   **(headers or {})})
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, dict(reply.getheaders()), json.loads(data) if data else {}


def post(gw, path: str, payload, headers=None):
    return raw(gw, "POST", path, json.dumps(payload).encode(), headers)


def chat_body(text: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def assert_error(status: int, body: dict, expected: int, message: str = "") -> None:
    assert status == expected, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert message in body["error"]["message"]


# -- the happy path through the openai package ----------------------------------------------

def test_chat_non_streaming_maps_usage_and_cached_tokens(gateway, fake):
    c = client(gateway)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    first = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                      temperature=0, extra_headers={"X-Session-Id": "u1"})
    assert first.object == "chat.completion" and first.id.startswith("chatcmpl-")
    assert first.choices[0].message.role == "assistant"
    assert first.choices[0].message.content == "echo: hi there"
    assert first.usage.prompt_tokens == 6 and first.usage.completion_tokens == 3
    assert first.usage.total_tokens == 9
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "more"}]
    second = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                       extra_headers={"X-Session-Id": "u1"})
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    sent = fake[1].requests[-1]
    assert sent.session_id == "default/u1" and sent.tenant == "default"
    assert [(m.role, m.content) for m in sent.messages][-2:] == [
        ("assistant", "echo: hi there"), ("user", "more")]


def test_chat_streaming_with_usage(gateway):
    stream = client(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "one two three"}], stream=True,
        stream_options={"include_usage": True}, user="streamer")
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "echo: one two three"
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == "stop" and all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0
    assert len({ch.id for ch in chunks}) == 1


def test_stream_without_usage_ends_with_done(gateway):
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat_body("a b", stream=True)),
                 {"Content-Type": "application/json"})
    reply = conn.getresponse()
    assert reply.status == 200 and reply.getheader("Content-Type") == "text/event-stream"
    events = [line for line in reply.read().decode().split("\n\n") if line]
    conn.close()
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert not any("usage" in chunk for chunk in chunks)
    # every delta holds its content, "" in the finishing chunk, as vLLM's (clients that
    # `text += delta.content` break on OpenAI's bare {}: LMCache's long-doc-qa)
    assert all(isinstance(chunk["choices"][0]["delta"]["content"], str) for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"][0]["delta"]["content"] == ""


def test_sampling_parameters_reach_the_scheduler(gateway, fake):
    c = client(gateway)
    c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                              max_completion_tokens=7, temperature=0.5, stop=["\n", "END"],
                              seed=42, extra_body={"ignore_eos": True})
    sent = fake[1].requests[-1]
    assert (sent.max_tokens, sent.temperature, list(sent.stop), sent.seed, sent.ignore_eos) == (
        7, 0.5, ["\n", "END"], 42, True)
    c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                              stop="STOP")
    sent = fake[1].requests[-1]
    assert list(sent.stop) == ["STOP"] and sent.max_tokens == 0 and sent.temperature == 1.0


def test_session_from_the_header_then_conversation_id_never_a_user(gateway, fake):
    requests = fake[1].requests
    post(gateway, "/v1/chat/completions", chat_body("a", user="body", conversation_id="conv"),
         {"X-Session-Id": "hdr", "x-user-id": "uid"})
    assert requests[-1].session_id == "default/hdr"
    post(gateway, "/v1/chat/completions", chat_body("a", user="body", conversation_id="conv"))
    assert requests[-1].session_id == "default/conv"
    # a user's id names no conversation (a user may hold several): the scheduler recognises
    # the conversation from its messages, per tenant, as when nothing is named
    for headers, body in (({"x-user-id": "uid"}, chat_body("a", user="body")),
                          ({}, chat_body("a"))):
        post(gateway, "/v1/chat/completions", body, headers)
        assert (requests[-1].session_id, requests[-1].tenant) == ("", "default")


def test_completions_text_and_token_prompts(gateway, fake):
    c = client(gateway)
    reply = c.completions.create(model=MODEL, prompt="alpha beta", max_tokens=5, user="cmp")
    assert reply.object == "text_completion" and reply.choices[0].text == "echo: alpha beta"
    sent = fake[1].requests[-1]
    assert sent.raw_prompt == "alpha beta" and not sent.messages  # raw text: no chat template
    reply = c.completions.create(model=MODEL, prompt=[1, 2, 3], user="cmp-ids")
    assert list(fake[1].requests[-1].prompt_token_ids) == [1, 2, 3]
    assert fake[1].requests[-1].max_tokens == 16  # OpenAI's completions default
    chunks = list(c.completions.create(model=MODEL, prompt="s t", stream=True,
                                       stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "echo: s t"
    assert chunks[-1].usage.prompt_tokens == 2  # the fake counts words; no template around them


def test_models(gateway):
    models = client(gateway).models.list()
    assert [m.id for m in models.data] == [MODEL, "HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert client(gateway).models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client(gateway).models.retrieve("gpt-4")


def test_health_and_metrics(gateway):
    status, _, body = raw(gateway, "GET", "/health")
    assert status == 200 and body == {"status": "ok"}
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.port}/metrics") as reply:
        text = reply.read().decode()
    assert 'bidaw_gateway_requests_total{route="/v1/chat/completions",status="200"}' in text
    assert "bidaw_ttft_seconds_bucket" in text and 'bidaw_tokens_total{kind="cached"}' in text


# -- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("payload, param", [
    ({"model": MODEL}, "messages"),
    ({"model": MODEL, "messages": []}, "messages"),
    ({"model": MODEL, "messages": ["hi"]}, "messages[0]"),
    ({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content"),
    (chat_body("x", temperature=3), "temperature"),
    (chat_body("x", temperature="hot"), "temperature"),
    (chat_body("x", max_tokens=0), "max_tokens"),
    (chat_body("x", max_tokens=True), "max_tokens"),
    (chat_body("x", n=257), "n"),
    (chat_body("x", logprobs="yes"), "logprobs"),
    (chat_body("x", stop=[1]), "stop"),
    (chat_body("x", stream_options={"include_usage": True}), "stream_options"),
])
def test_bad_requests_get_400_with_param(gateway, payload, param):
    status, _, body = post(gateway, "/v1/chat/completions", payload)
    assert_error(status, body, 400)
    assert body["error"]["param"] == param and body["error"]["type"] == "invalid_request_error"


def test_malformed_json_and_non_object_body(gateway):
    status, _, body = raw(gateway, "POST", "/v1/chat/completions", b'{"model": "x", "mess')
    assert_error(status, body, 400, "not valid JSON")
    assert body["error"]["code"] == "invalid_json"
    status, _, body = raw(gateway, "POST", "/v1/chat/completions", b"[1, 2]")
    assert_error(status, body, 400, "JSON object")
    status, _, body = raw(gateway, "POST", "/v1/chat/completions", b"\xff\xfe")
    assert_error(status, body, 400, "not valid JSON")


def test_ten_megabyte_body_gets_413(gateway):
    big = json.dumps(chat_body("x" * (10 << 20))).encode()
    status, _, body = raw(gateway, "POST", "/v1/chat/completions", big)
    assert_error(status, body, 413, "exceeds")
    # chunked (no Content-Length): refused while reading
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body=iter([big[i:i + 65536] for i in
                                                           range(0, len(big), 65536)]),
                 headers={"Content-Type": "application/json"}, encode_chunked=True)
    reply = conn.getresponse()
    assert reply.status == 413 and json.loads(reply.read())["error"]["code"]
    conn.close()
    assert raw(gateway, "GET", "/health")[0] == 200  # and the gateway still serves


def test_unknown_route_model_and_method(gateway):
    status, _, body = raw(gateway, "GET", "/v1/nothing")
    assert_error(status, body, 404)
    status, _, body = post(gateway, "/v1/chat/completions", {**chat_body("x"), "model": "gpt-4"})
    assert_error(status, body, 404, "gpt-4")
    assert body["error"]["code"] == "model_not_found"
    status, _, body = raw(gateway, "GET", "/v1/chat/completions")
    assert_error(status, body, 405)


def test_ending_a_session_maps_the_schedulers_answer(gateway, fake):
    post(gateway, "/v1/chat/completions", chat_body("hi"), {"X-Session-Id": "to-end"})
    status, _, body = raw(gateway, "DELETE", "/v1/sessions/to-end")
    assert (status, body) == (200, {"id": "to-end", "object": "session.deleted",
                                    "deleted": True})
    assert fake[1].ended[-1] == "default/to-end"
    status, _, body = raw(gateway, "DELETE", "/v1/sessions/to-end")
    assert_error(status, body, 404, "to-end")


@pytest.mark.parametrize("method, path, words", [
    ("DELETE", "/v1/sessions/s1", "cannot end sessions"),
    ("POST", "/v1/sessions/s1/prepare", "cannot prepare sessions")])
def test_a_session_call_behind_a_scheduler_that_cannot_is_a_501(method, path, words):
    # a scheduler with no EndSession / PrepareSession: an older version, in a rolling upgrade
    server = Server("127.0.0.1:0", [(scheduler_pb2_grpc.add_SchedulerServicer_to_server,
                                     scheduler_pb2_grpc.SchedulerServicer())],
                    name="bidaw.v1.Scheduler", token="")
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}")
    try:
        with BackgroundGateway(config) as gw:
            status, _, body = raw(gw, method, path)
    finally:
        server.stop(0)
    assert_error(status, body, 501, words)
    assert body["error"]["code"] == "not_implemented"


def test_preparing_a_session_answers_202_with_where_its_kv_is(gateway, fake):
    post(gateway, "/v1/chat/completions", chat_body("hi"), {"X-Session-Id": "to-warm"})
    status, _, body = raw(gateway, "POST", "/v1/sessions/to-warm/prepare")
    assert (status, body) == (202, {"id": "to-warm", "object": "session.prepare",
                                    "kv_tier": "loading"})
    assert fake[1].prepared[-1] == ("default", "default/to-warm")
    status, _, body = raw(gateway, "POST", "/v1/sessions/to-warm/prepare")
    assert (status, body) == (202, {"id": "to-warm", "object": "session.prepare",
                                    "kv_tier": "dram"})
    status, _, body = raw(gateway, "POST", "/v1/sessions/never-seen/prepare")
    assert_error(status, body, 404, "never-seen")
    assert body["error"]["code"] == "session_not_found" and body["error"]["param"] == "session"


def test_the_http_client_prepares_a_session(gateway, fake):
    from services.client.http_chat_client import HttpChatClient

    post(gateway, "/v1/chat/completions", chat_body("hi"), {"X-Session-Id": "team/warm 1"})
    c = HttpChatClient(gateway.url)
    assert c.prepare("team/warm 1") == "loading"  # the "/" and " " quoted in the path
    assert c.prepare("team/warm 1") == "dram"
    assert fake[1].prepared[-1] == ("default", "default/team/warm 1")
    assert c.prepare("nobody") is None


@pytest.mark.parametrize("path", ["/v1/sessions/" + "s" * 200 + "/prepare",  # > max_session_id
                                  "/v1/sessions/a%01b/prepare"])              # not printable
def test_preparing_a_bad_session_id_is_a_400(gateway, fake, path):
    calls = len(fake[1].prepared)
    status, _, body = raw(gateway, "POST", path)
    assert_error(status, body, 400)
    assert body["error"]["code"] == "invalid_value" and len(fake[1].prepared) == calls


def test_a_prepare_is_scoped_to_the_callers_tenant(fake):
    server, scheduler = fake
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}",
                           api_keys="acme:sk-acme-1,globex:sk-globex-1")
    with BackgroundGateway(config) as gw:
        acme = {"Authorization": "Bearer sk-acme-1"}
        post(gw, "/v1/chat/completions", chat_body("hi"), {"X-Session-Id": "shared", **acme})
        status, _, body = raw(gw, "POST", "/v1/sessions/shared/prepare", headers=acme)
        assert status == 202 and body["kv_tier"] == "loading"
        assert scheduler.prepared[-1] == ("acme", "acme/shared")
        status, _, body = raw(gw, "POST", "/v1/sessions/shared/prepare",
                              headers={"Authorization": "Bearer sk-globex-1"})
        assert_error(status, body, 404)  # globex's own "shared": never seen
        assert scheduler.prepared[-1] == ("globex", "globex/shared")
        assert raw(gw, "POST", "/v1/sessions/shared/prepare")[0] == 401


def test_scheduler_errors_map_to_http(gateway):
    status, headers, body = post(gateway, "/v1/chat/completions", chat_body("!invalid"))
    assert_error(status, body, 400, "max_tokens 99999 exceeds the limit")
    assert body["error"]["param"] == "max_tokens"  # the scheduler's message names it first
    status, headers, body = post(gateway, "/v1/chat/completions", chat_body("!exhausted"))
    assert_error(status, body, 429) and headers["Retry-After"] == "1"
    assert headers["Retry-After"] == "1"
    status, headers, body = post(gateway, "/v1/chat/completions", chat_body("!unavailable",
                                                                             stream=True))
    assert_error(status, body, 503)
    assert headers["Retry-After"] == "1"
    # the deployment's own misconfiguration: 503 saying so, never a 500
    status, headers, body = post(gateway, "/v1/chat/completions", chat_body("!unauthenticated"))
    assert_error(status, body, 503, "refused the gateway")
    assert body["error"]["code"] == "backend_refused"
    with pytest.raises(openai.RateLimitError):
        client(gateway).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "!exhausted"}])


def test_error_after_streaming_started_is_sent_in_band(gateway):
    chunks = client(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "!midstream"}], stream=True)
    with pytest.raises(openai.APIError, match="backend error INTERNAL"):
        list(chunks)


def test_overload_sheds_with_429_and_retry_after(gateway, fake):
    _, scheduler = fake
    scheduler.release.clear()
    scheduler.blocked = 0
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        post(gateway, "/v1/chat/completions", chat_body("!block"))[0])) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while scheduler.blocked < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    status, headers, body = post(gateway, "/v1/chat/completions", chat_body("x"))
    scheduler.release.set()
    for t in threads:
        t.join(30)
    assert_error(status, body, 429, "in flight")
    assert headers["Retry-After"] == "1" and results == [200, 200, 200]
    assert post(gateway, "/v1/chat/completions", chat_body("x"))[0] == 200


def test_client_hanging_up_cancels_the_turn(gateway, fake):
    _, scheduler = fake
    scheduler.release.clear()
    scheduler.blocked = scheduler.cancelled = 0
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat_body("!block")),
                 {"Content-Type": "application/json"})
    deadline = time.monotonic() + 10
    while scheduler.blocked < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    conn.close()
    while scheduler.cancelled < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    scheduler.release.set()
    assert scheduler.cancelled == 1


def test_scheduler_down_gives_503():
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{free_port()}",
                           request_timeout_s=5)
    with BackgroundGateway(config) as gw:
        status, headers, body = post(gw, "/v1/chat/completions", chat_body("x"))
        assert_error(status, body, 503)
        assert headers["Retry-After"] == "1"
        assert raw(gw, "GET", "/health")[0] == 503
