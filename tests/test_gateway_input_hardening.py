"""Malformed requests at a real gateway (aiohttp on loopback, in front of a fake scheduler): lone
surrogates in headers and body strings, JSON nested 100,000 deep, integers beyond 64 bits,
non-finite numbers, bytes aiohttp cannot parse. Each gets a 4xx OpenAI-style JSON error naming
what is wrong, the gateway logs no traceback, and nothing reaches the scheduler."""
from __future__ import annotations

import json
import logging
import socket

import pytest

from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from services.gateway.json_body import nesting_ok
from tests.fake_scheduler import start_fake_scheduler

KEY = "sk-hardening-secret-0123"
CHAT = b"/v1/chat/completions"


@pytest.fixture(scope="module")
def scheduler():
    server, fake = start_fake_scheduler()
    yield server, fake
    server.stop(0)


@pytest.fixture(scope="module")
def fake(scheduler):
    return scheduler[1]


@pytest.fixture(scope="module")
def gateway(scheduler):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{scheduler[0].port}",
                           api_keys=f"t1:{KEY}", request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


@pytest.fixture(autouse=True)
def log_records(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def send(gw, raw: bytes) -> tuple[int, bytes]:
    """Raw bytes on a socket (http.client refuses to send most of these inputs)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def post(gw, body: bytes, headers: bytes = b"", path: bytes = CHAT) -> tuple[int, dict]:
    status, data = send(gw, b"POST " + path + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                        b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Type: "
                        b"application/json\r\n" + headers +
                        b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return status, json.loads(data)


def chat(content: str = "hi", **extra) -> bytes:
    return json.dumps({"model": "smollm2-135m", "messages": [{"role": "user",
                                                              "content": content}], **extra}
                      ).encode()


def assert_refused(status: int, body: dict, param, caplog, text: str = "") -> None:
    assert 400 <= status < 500, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param, body
    assert text in body["error"]["message"], body
    tracebacks = [r for r in caplog.records if r.exc_info or "unexpected" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


def test_a_valid_request_still_goes_through(gateway, fake, log_records):
    before = len(fake.requests)
    status, body = post(gateway, chat("hello", max_tokens=4))
    assert status == 200, body
    assert len(fake.requests) == before + 1


@pytest.mark.parametrize("name,raw", [
    ("content", b'{"model":"smollm2-135m","messages":[{"role":"user","content":"a\\ud800b"}]}'),
    ("user", b'{"model":"smollm2-135m","user":"\\udfff","messages":[{"role":"user",'
             b'"content":"hi"}]}'),
    ("stop", b'{"model":"smollm2-135m","stop":["\\ud83d"],"messages":[{"role":"user",'
             b'"content":"hi"}]}'),
    ("raw-bytes", b'{"model":"smollm2-135m","messages":[{"role":"user","content":"\xed\xa0\x80"'
                  b'}]}'),
])
def test_lone_surrogates_in_the_body_get_400_naming_the_field(gateway, fake, log_records,
                                                             name, raw):
    before = len(fake.requests)
    status, body = post(gateway, raw)
    param = {"content": "messages[0].content", "user": "user", "stop": "stop[0]",
             "raw-bytes": "messages[0].content"}[name]
    assert_refused(status, body, param, log_records, "surrogate")
    assert len(fake.requests) == before


@pytest.mark.parametrize("header", [b"X-Session-Id", b"Authorization"])
@pytest.mark.parametrize("value", [b"\xed\xa0\x80", b"ab\xff\xfe"])
def test_undecodable_header_bytes_get_400_naming_the_header(gateway, fake, log_records, header,
                                                            value):
    before = len(fake.requests)
    if header == b"Authorization":
        raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
               b"Authorization: Bearer sk-" + value + b"\r\nContent-Length: 2\r\n\r\n{}")
        status, data = send(gateway, raw)
        body = json.loads(data)
    else:
        status, body = post(gateway, chat(), header + b": " + value + b"\r\n")
    assert_refused(status, body, header.decode(), log_records, "UTF-8")
    assert len(fake.requests) == before


def test_json_nested_100000_deep_gets_400_without_recursing(gateway, log_records):
    status, body = post(gateway, b'{"messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert_refused(status, body, None, log_records, "deeper than 64")


def test_nesting_bound_counts_brackets_outside_strings_only():
    assert nesting_ok(b"[" * 64 + b"]" * 64)
    assert not nesting_ok(b"[" * 65 + b"]" * 65)
    assert nesting_ok(b'{"a": "' + b"[" * 1000 + b'", "b": [[{}]]}')
    assert nesting_ok(b'["\\"[[[[' + b"[" * 100 + b'"]')  # an escaped quote stays in the string
    assert nesting_ok(b"[]," * 10_000)  # many brackets, shallow
    assert not nesting_ok(b"[" * 100 + b"}" * 100)  # unbalanced


@pytest.mark.parametrize("field,value", [("max_tokens", 10**30), ("seed", -2**64),
                                         ("max_tokens", 2**64)])
def test_integers_beyond_64_bits_get_400_naming_the_field(gateway, log_records, field, value):
    status, body = post(gateway, chat(**{field: value}))
    assert_refused(status, body, field, log_records, "64-bit")


def test_token_ids_beyond_64_bits_in_a_completion_prompt_get_400(gateway, log_records):
    raw = b'{"model":"smollm2-135m","prompt":[1,2,' + str(2**70).encode() + b']}'
    status, body = post(gateway, raw, path=b"/v1/completions")
    assert_refused(status, body, "prompt[2]", log_records, "64-bit")


def test_integers_too_long_to_convert_get_400(gateway, log_records):
    raw = b'{"max_tokens":' + b"9" * 5000 + b"}"
    status, body = post(gateway, raw)
    assert_refused(status, body, None, log_records, "not valid JSON")


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_numbers_get_400(gateway, log_records, number):
    status, body = post(gateway, b'{"temperature":' + number + b',"messages":[]}')
    assert_refused(status, body, "temperature", log_records, "not a finite number")


def test_an_unparsable_authorization_header_is_neither_echoed_nor_logged(gateway, log_records):
    secret = b"sk-neverechoed-4242"
    status, data = send(gateway, b"GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                        b"Authorization: Bearer " + secret + b"\x01x\r\n\r\n")
    body = json.loads(data)
    assert status == 400 and secret not in data, data
    assert set(body["error"]) == {"message", "type", "param", "code"}
    logged = "\n".join(r.getMessage() + str(r.exc_info or "") + str(r.exc_text or "")
                       for r in log_records.records)
    assert "malformed HTTP request" in logged
    assert secret.decode() not in logged
    assert not [r for r in log_records.records if r.exc_info]


def test_the_access_log_says_why_a_request_was_refused_in_one_escaped_line(gateway, caplog):
    """A 400 logged only its status: an operator could not tell why. Now its code and field,
    never its message, and a field name with a newline cannot forge a second log line."""
    status, body = post(gateway, json.dumps({"model": "smollm2-135m", "messages": [
        {"role": "user", "content": "hi"}], "evil\nPOST /forged 200": 1}).encode())
    assert_refused(status, body, "evil\nPOST /forged 200", caplog)
    lines = [r.getMessage() for r in caplog.records if r.name == "bidaw.gateway"
             and "/v1/chat/completions 400" in r.getMessage()]
    assert lines and lines[-1].endswith("(unknown_parameter, evil\\nPOST /forged 200)")
    assert all("\n" not in r.getMessage() for r in caplog.records if r.name == "bidaw.gateway")
    status, body = post(gateway, chat(temperature=9))
    lines = [r.getMessage() for r in caplog.records if r.name == "bidaw.gateway"
             and "/v1/chat/completions 400" in r.getMessage()]
    assert status == 400 and lines[-1].endswith(f"({body['error']['code']}, temperature)")
