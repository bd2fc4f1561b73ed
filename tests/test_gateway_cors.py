"""CORS for browser front ends: off by default, on for the origins `--allowed-origins` names.
A real gateway (API keys on) before a fake scheduler; requests as a browser sends them."""
from __future__ import annotations

import http.client
import json

import pytest

from services.gateway.config import GatewayConfig
from tests.background_gateway import BackgroundGateway
from tests.fake_scheduler import fake_on_a_port

APP = "https://chat.example.com"
KEY = {"Authorization": "Bearer sk-acme"}
CHAT = json.dumps({"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}],
                   "stream": True}).encode()
PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}


@pytest.fixture(scope="module")
def fake():
    yield from fake_on_a_port()


def _gateway(fake, origins: list[str]) -> BackgroundGateway:
    return BackgroundGateway(GatewayConfig(
        listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake.port}", api_keys="acme:sk-acme",
        allowed_origins=origins, request_timeout_s=30))


def _ask(gw, method: str, path: str, headers: dict, body: bytes | None = None):
    """(status, headers with lower-case names, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request(method, path, body=body, headers=headers)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, {k.lower(): v for k, v in reply.getheaders()}, data


def _not_allowed(gw, origin: str) -> None:
    """A page of `origin` may read no answer, and its preflight is not answered."""
    status, headers, _ = _ask(gw, "OPTIONS", "/v1/chat/completions",
                              {"Origin": origin, **PREFLIGHT})
    assert status == 405 and "access-control-allow-origin" not in headers
    status, headers, _ = _ask(gw, "GET", "/v1/models", {"Origin": origin, **KEY})
    assert status == 200 and "access-control-allow-origin" not in headers


def test_without_allowed_origins_no_page_may_read_an_answer(fake):
    with _gateway(fake, []) as gw:
        _not_allowed(gw, APP)


def test_an_allowed_origin_is_preflighted_without_a_key_and_reads_streams_and_errors(fake):
    with _gateway(fake, [APP, "http://localhost:3000"]) as gw:
        status, headers, body = _ask(gw, "OPTIONS", "/v1/chat/completions",
                                     {"Origin": APP, **PREFLIGHT})
        assert status == 204 and body == b""
        assert headers["access-control-allow-origin"] == APP
        assert "POST" in headers["access-control-allow-methods"]
        assert headers["access-control-allow-headers"] == PREFLIGHT[
            "Access-Control-Request-Headers"]
        # the request itself, streamed: the origin may read it and the session it continued
        status, headers, body = _ask(gw, "POST", "/v1/chat/completions",
                                     {"Origin": APP, "Content-Type": "application/json",
                                      **KEY}, CHAT)
        assert status == 200 and b"data: [DONE]" in body
        assert headers["access-control-allow-origin"] == APP
        assert "x-bidaw-session" in headers["access-control-expose-headers"]
        assert "Origin" in headers["vary"]
        # a refusal is readable too (no key: 401), so the page can show why
        status, headers, _ = _ask(gw, "POST", "/v1/chat/completions",
                                  {"Origin": APP, "Content-Type": "application/json"}, CHAT)
        assert status == 401 and headers["access-control-allow-origin"] == APP
        for origin in ("https://evil.example", "https://chat.example.com.evil.example"):
            _not_allowed(gw, origin)  # another site


def test_any_origin_with_a_star(fake):
    with _gateway(fake, ["*"]) as gw:
        status, headers, _ = _ask(gw, "GET", "/v1/models", {"Origin": "https://x.test", **KEY})
        assert status == 200 and headers["access-control-allow-origin"] == "*"
        assert "vary" not in headers
        _, headers, _ = _ask(gw, "GET", "/v1/models", KEY)  # not a browser: nothing added
        assert "access-control-allow-origin" not in headers


@pytest.mark.parametrize("origin", ["https://x.test/", "https://x.test/app", "x.test",
                                    "ftp://x.test", "https://x.test:99999999"])
def test_a_bad_origin_is_refused_naming_the_flag(origin):
    with pytest.raises(ValueError, match="--allowed-origins"):
        GatewayConfig(allowed_origins=[origin])
