"""Several choices in one stream (n > 1), when a turn fails or the client leaves, against a fake
scheduler: refused before the stream opens, an HTTP error; failing after, reported in-band; a
client hanging up cancels every choice's turn."""
from __future__ import annotations

import http.client
import json
import time

import openai
import pytest

from tests.test_gateway_api import MODEL, chat_body, client, fake, gateway, post  # noqa: F401


def test_refused_before_the_stream_is_an_http_error(gateway):  # noqa: F811
    status, headers, body = post(gateway, "/v1/chat/completions",
                                 chat_body("!unavailable", stream=True, n=2))
    assert status == 503 and body["error"]["message"] and headers["Retry-After"] == "1"


def test_failing_after_the_stream_opened_is_reported_in_band(gateway):  # noqa: F811
    chunks = client(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "!midstream"}], stream=True, n=2)
    with pytest.raises(openai.APIError, match="backend error INTERNAL"):
        list(chunks)


def test_a_client_hanging_up_cancels_every_choice(gateway, fake):  # noqa: F811
    _, scheduler = fake
    scheduler.release.clear()
    scheduler.blocked = scheduler.cancelled = 0
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    conn.request("POST", "/v1/chat/completions",
                 json.dumps(chat_body("!block", stream=True, n=3)),
                 {"Content-Type": "application/json"})
    deadline = time.monotonic() + 10
    while scheduler.blocked < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    conn.close()
    while scheduler.cancelled < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    scheduler.release.set()
    assert (scheduler.blocked, scheduler.cancelled) == (3, 3)
