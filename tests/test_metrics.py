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
    names = {m.name for m in REGISTRY.collect() if m.name.startswith("bidaw")}
    assert len(names) >= 25
    exported = {obj._name for obj in vars(metrics).values() if hasattr(obj, "_name")}
    assert exported <= names and all(n.startswith("bidaw_") for n in exported)


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
