"""SGLang's `return_cached_tokens_details` on the OpenAI routes (its bench_serving's
--cache-report): where the reused prompt tokens were read from, in SGLang's `sglext`, over a real
gateway and a fake scheduler."""
from __future__ import annotations

import http.client
import json

from services.gateway.responses import cached_details
from services.runtime.gen import common_pb2
from tests.test_gateway_api import MODEL, assert_error, fake, gateway, post  # noqa: F401

SESSION = {"X-Session-Id": "cache-report"}


def chat(text: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4,
            "return_cached_tokens_details": True, **extra}


def events(gw, body: dict) -> list[dict]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json", **SESSION})
    data = conn.getresponse().read().decode()
    conn.close()
    chunks = [e[len("data: "):] for e in data.split("\n\n") if e]
    assert chunks[-1] == "[DONE]"
    return [json.loads(c) for c in chunks[:-1]]


def test_the_tier_names_where_the_cached_tokens_came_from():
    def summary(tier, cached):
        return common_pb2.TurnSummary(kv_tier=tier, cached_tokens=cached)
    assert cached_details(summary(common_pb2.TIER_DRAM, 7)) == {"device": 0, "host": 7}
    assert cached_details(summary(common_pb2.TIER_SSD, 7)) == {
        "device": 0, "host": 0, "storage": 7, "storage_backend": "bidaw-ssd"}
    assert cached_details(summary(common_pb2.TIER_NONE, 0)) == {"device": 0, "host": 0}


def test_chat_answers_carry_sglext_when_asked(gateway):
    status, _, first = post(gateway, "/v1/chat/completions", chat("one two three"), SESSION)
    assert status == 200 and first["sglext"] == {"cached_tokens_details": {"device": 0,
                                                                           "host": 0}}
    status, _, second = post(gateway, "/v1/chat/completions", chat("one two three four"),
                             SESSION)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and second["sglext"]["cached_tokens_details"]["host"] == cached
    plain = post(gateway, "/v1/chat/completions",
                 chat("one", return_cached_tokens_details=False), SESSION)[2]
    assert "sglext" not in plain
    status, _, got = post(gateway, "/v1/completions", {
        "model": MODEL, "prompt": "one two", "max_tokens": 2,
        "return_cached_tokens_details": True})
    assert status == 200 and "cached_tokens_details" in got["sglext"]


def test_streams_send_it_in_a_chunk_of_its_own_before_the_usage(gateway):
    chunks = events(gateway, chat("a b c d", stream_options={"include_usage": True}))
    ext = [i for i, c in enumerate(chunks) if "sglext" in c]
    assert len(ext) == 1 and chunks[ext[0]]["choices"] == []
    assert ext[0] == len(chunks) - 2 and "usage" in chunks[-1]
    details = chunks[ext[0]]["sglext"]["cached_tokens_details"]
    assert details["host"] == chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert not any("sglext" in c for c in events(gateway, chat(
        "a b", return_cached_tokens_details=False)))


def test_a_non_boolean_is_refused(gateway):
    status, _, got = post(gateway, "/v1/chat/completions",
                          chat("x", return_cached_tokens_details="yes"))
    assert_error(status, got, 400)
    assert got["error"]["param"] == "return_cached_tokens_details"


def vllm_counts(gw) -> tuple[float, float]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("vllm:")}
    return values["vllm:prefix_cache_queries_total"], values["vllm:prefix_cache_hits_total"]


def test_vllms_prefix_cache_counters_count_the_same_tokens(gateway):
    """Tools that compute a hit rate from a vLLM server's /metrics (ClawPerf) read these."""
    queries, hits = vllm_counts(gateway)
    post(gateway, "/v1/chat/completions", chat("p q r"), {"X-Session-Id": "vllm-counters"})
    _, _, got = post(gateway, "/v1/chat/completions", chat("p q r s"),
                     {"X-Session-Id": "vllm-counters"})
    usage = got["usage"]
    after_queries, after_hits = vllm_counts(gateway)
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0
    assert after_hits - hits == usage["prompt_tokens_details"]["cached_tokens"]
    assert after_queries - queries >= usage["prompt_tokens"]
