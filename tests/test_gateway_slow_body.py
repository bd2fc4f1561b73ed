"""Request bodies at a real gateway (aiohttp on loopback, API keys on, a fake scheduler): a body
is read, within --body-read-timeout-s, before its turn takes an admission slot. Clients that
send headers and then stall never fill the slots others need (they get 408 when the read time
is up), and a body that does not match its Content-Encoding is a 400, logged without a
traceback."""
from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
import time
import zlib

import pytest

from services.gateway.config import GatewayConfig
from tests.background_gateway import BackgroundGateway
from tests.fake_scheduler import fake_on_a_port

KEYS = {"acme": "sk-slow-acme-0123", "globex": "sk-slow-globex-4567"}
SLOTS, READ_S = 2, 1.5
CHAT = json.dumps({"model": "smollm2-135m", "messages": [{"role": "user",
                                                         "content": "hi"}]}).encode()


fake = pytest.fixture(scope="module", name="fake")(fake_on_a_port)


@pytest.fixture(scope="module")
def gateway(fake):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake.port}",
                           api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()),
                           max_in_flight=SLOTS, max_queue_wait_s=20, request_timeout_s=30,
                           body_read_timeout_s=READ_S)
    with BackgroundGateway(config) as gw:
        yield gw


def head(tenant: str, length: int, extra: bytes = b"") -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + KEYS[tenant].encode() + b"\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % length)


def response(sock: socket.socket) -> tuple[int, dict, dict]:
    """One HTTP response read by its Content-Length (the connection may stay open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, json.loads(body)


def exchange(gw, raw: bytes, timeout: float = 30) -> tuple[int, dict, dict]:
    with socket.create_connection(("127.0.0.1", gw.port), timeout=timeout) as sock:
        sock.sendall(raw)
        return response(sock)


def stalled(gw, count: int, tenant: str = "acme") -> list[socket.socket]:
    """Sockets that sent headers promising 1000 bytes, then only the body's first bytes."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        sock.sendall(head(tenant, 1000) + b'{"model":')
        socks.append(sock)
    return socks


def admitted(gw) -> tuple[int, int, int]:
    """(turns holding a slot, turns waiting for one, the in-flight gauge), read on the
    gateway's own loop."""
    g = gw.gateway
    return g.in_flight, g.admission.queue.running, g.admission.queue.waiting


def test_stalled_bodies_hold_no_slot_and_others_are_served_at_once(gateway):
    socks = stalled(gateway, SLOTS * 3)
    try:
        time.sleep(0.3)  # the gateway has read their headers and is waiting for the rest
        assert admitted(gateway) == (0, 0, 0)
        for tenant in ("globex", "acme"):  # the stalling tenant too: a body is not a slot
            start = time.monotonic()
            status, _, body = exchange(gateway, head(tenant, len(CHAT)) + CHAT)
            assert status == 200, body
            assert time.monotonic() - start < 5  # not queued behind them (20 s, then 429)
        assert admitted(gateway) == (0, 0, 0)
    finally:
        for sock in socks:
            sock.close()


def test_a_stalled_body_gets_408_when_its_read_time_is_up(gateway, fake):
    sent = len(fake.requests)
    [sock] = stalled(gateway, 1)
    with sock:
        start = time.monotonic()
        status, headers, body = response(sock)
        waited = time.monotonic() - start
    assert status == 408 and body["error"]["code"] == "request_timeout", body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert headers.get("connection", "").lower() == "close"  # the rest is never read
    assert READ_S - 0.5 < waited < READ_S + 3
    assert len(fake.requests) == sent and admitted(gateway) == (0, 0, 0)


def test_a_slow_body_that_arrives_in_time_is_served(gateway):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(head("acme", len(CHAT)) + CHAT[:10])
        time.sleep(READ_S / 3)
        sock.sendall(CHAT[10:])
        status, _, body = response(sock)
    assert status == 200, body


def test_slots_still_bound_turns_whose_bodies_have_arrived(gateway, fake):
    """The read moved before admission; admission itself is unchanged: turns beyond the
    slots wait, and are all served."""
    fake.release.clear()
    block = json.dumps({"model": "smollm2-135m", "messages": [
        {"role": "user", "content": "!block"}]}).encode()
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        exchange(gateway, head("acme", len(block)) + block)[0])) for _ in range(SLOTS + 1)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while admitted(gateway) != (SLOTS, SLOTS, 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert admitted(gateway) == (SLOTS, SLOTS, 1)
    finally:
        fake.release.set()  # a failure here must not leave the slots held for later tests
        for t in threads:
            t.join(30)
    assert results == [200] * (SLOTS + 1)


@pytest.fixture()
def log_records(caplog):
    caplog.set_level(logging.INFO)
    return caplog


@pytest.mark.parametrize("encoding", [b"gzip", b"deflate"])
def test_a_body_that_does_not_match_its_content_encoding_is_a_400(gateway, fake, log_records,
                                                                  encoding):
    sent = len(fake.requests)
    raw = head("acme", len(CHAT), b"Content-Encoding: " + encoding + b"\r\n") + CHAT
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(raw)  # keep-alive: aiohttp drains the rest after the answer
        status, _, body = response(sock)
        time.sleep(0.2)
    assert status == 400 and body["error"]["code"] == "invalid_body", body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert encoding.decode() in body["error"]["message"]
    assert len(fake.requests) == sent
    noisy = [r for r in log_records.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [r.getMessage() for r in noisy]
    lines = [r.getMessage() for r in log_records.records if r.name.startswith(("bidaw",
                                                                               "aiohttp"))]
    assert len(lines) == 1 and lines[0].startswith("POST /v1/chat/completions 400 "), lines


@pytest.mark.parametrize("encoding, packed", [(b"gzip", gzip.compress(CHAT)),
                                              (b"deflate", zlib.compress(CHAT))])
def test_a_body_that_matches_its_content_encoding_is_served(gateway, encoding, packed):
    raw = head("acme", len(packed), b"Content-Encoding: " + encoding + b"\r\n") + packed
    status, _, body = exchange(gateway, raw)
    assert status == 200, body
