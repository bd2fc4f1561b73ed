"""Session ids outside ASCII through a real gateway (a fake scheduler behind it): the value a
client reads from `x-bidaw-session`, sent back as X-Session-Id (or in /v1/sessions/{id}),
names the same session; two ids never share a header value; ids of visible ASCII without `%`
are unchanged both ways."""
from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from services.gateway.config import GatewayConfig
from tests.background_gateway import BackgroundGateway
from tests.fake_scheduler import fake_on_a_port

TENANT = "acme"
KEY = "sk-session-header-0123"


fake = pytest.fixture(scope="module", name="fake")(fake_on_a_port)


@pytest.fixture(scope="module")
def gateway(fake):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake.port}",
                           api_keys=f"{TENANT}:{KEY}", request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


def call(gw, method: str, path: str, body: dict | None = None,
         headers: dict | None = None) -> tuple[int, http.client.HTTPMessage, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request(method, path, json.dumps(body).encode() if body else None,
                     {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
                      **(headers or {})})
        reply = conn.getresponse()
        return reply.status, reply.headers, json.loads(reply.read() or b"{}")
    finally:
        conn.close()


def turn(gw, text: str, named: str | None = None, header: str | bytes | None = None):
    """(status, x-bidaw-session, cached tokens, body) of one chat turn; `named`: the session
    named in the body (`conversation_id`: JSON text, any character)."""
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": text}]}
    if named is not None:
        body["conversation_id"] = named
    status, headers, reply = call(gw, "POST", "/v1/chat/completions", body,
                                  {"X-Session-Id": header} if header is not None else None)
    cached = reply.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens")
    return status, headers.get("x-bidaw-session"), cached, reply


@pytest.mark.parametrize("session, shown", [
    ("café-7", "caf%C3%A9-7"),
    ("caf%C3%A9-7", "caf%25C3%25A9-7"),  # `%` is escaped too: never café-7's value
    ("100%", "100%25"),
    ("会話 1", "%E4%BC%9A%E8%A9%B1 1"),
    (" padded ", "%20padded%20"),  # header parsing would strip the spaces
    ("plain-id_1.2~x/y:z@w a", "plain-id_1.2~x/y:z@w a"),  # visible ASCII: as it is
])
def test_the_header_sent_back_names_the_same_session(gateway, fake, session, shown):
    status, header, cached, _ = turn(gateway, "one two three", named=session)
    assert status == 200 and header == shown
    assert fake.requests[-1].session_id == f"{TENANT}/{session}"
    status, again, cached, _ = turn(gateway, "four five", header=header)
    assert status == 200 and again == header
    assert fake.requests[-1].session_id == f"{TENANT}/{session}"
    assert cached > 0  # the first turn's tokens: the same session continued


def test_ids_that_differ_never_share_a_header_value(gateway):
    ids = ["café-7", "caf%C3%A9-7", "caf%c3%a9-7", "x ", "x%20", "x", "%", "%25", "a%2"]
    headers = [turn(gateway, "hi", named=i)[1] for i in ids]
    assert len(set(headers)) == len(ids), dict(zip(ids, headers))


def test_a_raw_utf8_header_and_its_percent_form_name_one_session(gateway, fake):
    turn(gateway, "one two", header="é-raw".encode())  # UTF-8 bytes, as some clients send
    assert fake.requests[-1].session_id == f"{TENANT}/é-raw"
    status, header, cached, _ = turn(gateway, "three", header="%C3%A9-raw")
    assert (status, header) == (200, "%C3%A9-raw") and cached > 0
    assert fake.requests[-1].session_id == f"{TENANT}/é-raw"


def test_plain_ascii_ids_are_unchanged_both_ways(gateway, fake):
    for sid in ("s1", "user-42/chat:3", "a b"):
        status, header, _, _ = turn(gateway, "hi", header=sid)
        assert (status, header) == (200, sid)
        assert fake.requests[-1].session_id == f"{TENANT}/{sid}"


@pytest.mark.parametrize("header, problem", [("%FF%FE", "not UTF-8"), ("a%00b", "printable")])
def test_escapes_that_name_no_printable_text_are_a_400(gateway, fake, header, problem):
    sent = len(fake.requests)
    status, _, _, body = turn(gateway, "hi", header=header)
    assert status == 400 and body["error"]["param"] == "X-Session-Id", body
    assert problem in body["error"]["message"]
    assert len(fake.requests) == sent


def test_a_session_is_ended_and_prepared_by_its_header_value(gateway, fake):
    _, header, _, _ = turn(gateway, "one two", named="fin-é%")
    assert header == "fin-%C3%A9%25"
    path = "/v1/sessions/" + urllib.parse.quote(header, safe="")  # as docs/gateway.md shows
    status, _, body = call(gateway, "POST", path + "/prepare")
    assert status == 202, body
    assert fake.prepared[-1] == (TENANT, f"{TENANT}/fin-é%")
    status, _, body = call(gateway, "DELETE", path)
    assert status == 200 and body["deleted"] is True, body
    assert fake.ended[-1] == f"{TENANT}/fin-é%"


def test_conversation_id_names_the_session_as_vllms_multi_turn_proxy_reads_it(gateway, fake):
    """vLLM's benchmark client with --send-conversation-id: the body field (and the same id
    in X-Session-ID); the body field alone names the session too; a header wins over it."""
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "one two"}],
            "conversation_id": "CONV_ID_0"}
    status, headers, reply = call(gateway, "POST", "/v1/chat/completions", body)
    assert status == 200, reply
    assert headers["x-bidaw-session"] == "CONV_ID_0"
    assert fake.requests[-1].session_id == f"{TENANT}/CONV_ID_0"
    status, headers, _ = call(gateway, "POST", "/v1/chat/completions", body,
                              {"X-Session-ID": "CONV_ID_0"})
    assert status == 200 and headers["x-bidaw-session"] == "CONV_ID_0"
    _, headers, _ = call(gateway, "POST", "/v1/chat/completions", body,
                         {"X-Session-Id": "other"})
    assert headers["x-bidaw-session"] == "other"
    for bad, problem in ((7, "conversation_id"), ("x" * 5000, "conversation_id"),
                         ("a\nb", "conversation_id")):
        status, _, reply = call(gateway, "POST", "/v1/chat/completions",
                                {**body, "conversation_id": bad})
        assert status == 400 and reply["error"]["param"] == problem, reply


def test_cache_salt_reaches_the_scheduler_and_bad_ones_are_refused_by_name(gateway, fake):
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "one two"}]}
    status, _, _ = call(gateway, "POST", "/v1/chat/completions", {**body, "cache_salt": "s-1"})
    assert status == 200 and fake.requests[-1].cache_salt == "s-1"
    status, _, _ = call(gateway, "POST", "/v1/completions",
                        {"model": "smollm2-135m", "prompt": "hi", "cache_salt": "s-2"})
    assert status == 200 and fake.requests[-1].cache_salt == "s-2"
    status, _, reply = call(gateway, "POST", "/v1/responses",
                            {"model": "smollm2-135m", "input": "hi", "store": False,
                             "cache_salt": "s-3"})
    assert status == 200 and fake.requests[-1].cache_salt == "s-3", reply
    for bad in (7, "", "x" * 300, ["a"]):
        status, _, reply = call(gateway, "POST", "/v1/chat/completions",
                                {**body, "cache_salt": bad})
        assert status == 400 and reply["error"]["param"] == "cache_salt", reply
