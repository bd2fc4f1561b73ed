"""Prometheus metrics: the shared objects, the /metrics server, and every live service's /metrics."""
from __future__ import annotations

import urllib.request

from prometheus_client import REGISTRY

from services.runtime import metrics
from services.runtime.gen import common_pb2


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        return reply.read().decode()


def test_every_metric_is_named_bidaw():
    """Every metric is Bidaw's, but for vLLM's names of two turn counts (for tools that read
    a vLLM server's /metrics)."""
    names = {m.name for m in REGISTRY.collect() if m.name.startswith("bidaw")}
    assert len(names) >= 25
    exported = {obj._name for obj in vars(metrics).values() if hasattr(obj, "_name")}
    vllm = {"vllm:prefix_cache_queries", "vllm:prefix_cache_hits"}
    assert exported - vllm <= names and all(n.startswith("bidaw_") for n in exported - vllm)
    assert vllm <= exported


def test_observe_turn_counts_tokens_latency_and_tier():
    before = {k: sample("bidaw_tokens_total", kind=k) for k in ("prompt", "cached", "computed",
                                                                 "completion")}
    ttft = sample("bidaw_ttft_seconds_count", tier="ssd")
    summary = common_pb2.TurnSummary(prompt_tokens=100, cached_tokens=80, completion_tokens=11,
                                     kv_tier=common_pb2.TIER_SSD, ttft_s=0.2, latency_s=1.2,
                                     kv_load_s=0.05)
    metrics.observe_turn(summary)
    after = {k: sample("bidaw_tokens_total", kind=k) for k in before}
    assert {k: after[k] - before[k] for k in after} == {"prompt": 100, "cached": 80,
                                                        "computed": 20, "completion": 11}
    assert sample("bidaw_ttft_seconds_count", tier="ssd") == ttft + 1
    assert sample("bidaw_kv_load_seconds_count", tier="ssd") >= 1
    assert sample("bidaw_decode_tokens_per_second_count") >= 1  # 10 tokens in 1 s


def test_metrics_server_serves_and_is_started_once():
    port = metrics.start_metrics_server("127.0.0.1:0")
    assert port and metrics.start_metrics_server("127.0.0.1:0") == port
    assert metrics.start_metrics_server("") == 0
    # A counter no service in this process binds to a callback (gauges may be, by other tests).
    before = metrics.KV_WRITE_BYTES._value.get()
    metrics.KV_WRITE_BYTES.inc(3)
    text = scrape(f"http://127.0.0.1:{port}/metrics")
    value = next(float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("bidaw_kv_write_bytes_total "))
    assert value == before + 3


def test_every_service_of_the_deployment_serves_metrics(deployment):
    urls = deployment.metrics_urls
    assert set(urls) == {"store", "worker", "scheduler", "gateway"}
    for name, url in urls.items():
        assert metrics.SERVICE_PREFIXES[name] in scrape(url), name  # its own (test_metrics_scoping)


def _count(text: str, name: str, **labels) -> float:
    """A sample's value in a scrape (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def _counts(deployment) -> dict:
    urls = deployment.metrics_urls
    scheduler, gateway = scrape(urls["scheduler"]), scrape(urls["gateway"])
    return {"scheduler_ok": _count(scheduler, "bidaw_turns_total", outcome="ok"),
            "scheduler_cancelled": _count(scheduler, "bidaw_turns_total", outcome="cancelled"),
            "scheduler_error": _count(scheduler, "bidaw_turns_total", outcome="error"),
            "gateway_ok": _count(gateway, "bidaw_turns_total", outcome="ok"),
            "gateway_cancelled": _count(gateway, "bidaw_turns_total", outcome="cancelled"),
            "http_499": _count(gateway, "bidaw_gateway_requests_total", status="499"),
            "http_500": _count(gateway, "bidaw_gateway_requests_total", status="500")}


def test_a_turn_counts_once_and_a_client_that_hangs_up_is_no_server_error(deployment):
    """The scheduler counted every finished turn twice; a client that hung up mid-stream was
    counted and logged as HTTP 500 by the gateway and as an error by the scheduler."""
    import http.client
    import json
    import time

    host, port = deployment.gateway_url.split("//")[1].split("/")[0].split(":")
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Count to 50."}]}
    before = _counts(deployment)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "max_tokens": 4}),
                 {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()
    after = _counts(deployment)
    assert after["scheduler_ok"] - before["scheduler_ok"] == 1
    assert after["gateway_ok"] - before["gateway_ok"] == 1

    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/chat/completions",
                 json.dumps({**body, "max_tokens": 400, "ignore_eos": True, "stream": True}),
                 {"Content-Type": "application/json"})
    reply = conn.getresponse()
    assert reply.status == 200 and reply.read(6) == b"data: "
    conn.sock.close()  # hang up mid-stream
    conn.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = _counts(deployment)
        if now["http_499"] > after["http_499"] and now["scheduler_cancelled"] > \
                after["scheduler_cancelled"]:
            break
        time.sleep(0.2)
    assert now["http_499"] - after["http_499"] == 1 and now["http_500"] == after["http_500"]
    assert now["gateway_cancelled"] - after["gateway_cancelled"] == 1
    assert now["scheduler_cancelled"] - after["scheduler_cancelled"] == 1
    assert now["scheduler_error"] == after["scheduler_error"]
