"""Each service exports only its own metrics, and the gateway's /metrics (which shows every
tenant's traffic) needs a key when API keys are configured, unless scraped on --metrics-listen."""
from __future__ import annotations

import http.client

import pytest
from prometheus_client import generate_latest

from services.runtime import metrics
from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from tests.fake_scheduler import start_fake_scheduler

# unlabelled, so exported from import on by whoever exports them
OWN = {"gateway": "bidaw_gateway_in_flight", "scheduler": "bidaw_scheduler_running",
       "store": "bidaw_kv_promotion_bytes_total", "worker": "bidaw_worker_running"}


def families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


@pytest.mark.parametrize("service", sorted(OWN))
def test_a_service_exports_its_own_metrics_only(service):
    exported = families(generate_latest(metrics.registry_of(service)).decode())
    assert OWN[service] in exported
    for other, name in OWN.items():
        if other != service:
            assert name not in exported, (service, name)
    assert ("bidaw_ttft_seconds" in exported) == (service in ("gateway", "scheduler"))
    assert ("vllm:prefix_cache_hits_total" in exported) == (service in ("gateway", "scheduler"))
    assert any(f.startswith("process_") or f.startswith("python_") for f in exported)


@pytest.fixture(scope="module")
def scheduler():
    server, fake = start_fake_scheduler()
    yield server
    server.stop(0)


def scrape(port: int, key: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})
    reply = conn.getresponse()
    text = reply.read().decode()
    conn.close()
    return reply.status, text


def gateway(scheduler, **fields) -> BackgroundGateway:
    return BackgroundGateway(GatewayConfig(listen="127.0.0.1:0",
                                           scheduler=f"127.0.0.1:{scheduler.port}", **fields))


def test_metrics_need_a_key_when_api_keys_are_configured(scheduler):
    with gateway(scheduler, api_keys="t1:sk-tenant-one", metrics_key="mk-scraper") as gw:
        status, text = scrape(gw.port)
        assert status == 401 and "bidaw_" not in text
        assert "mk-scraper" not in text and "sk-tenant-one" not in text
        assert scrape(gw.port, "wrong")[0] == 401
        for key in ("sk-tenant-one", "mk-scraper"):
            status, text = scrape(gw.port, key)
            assert status == 200 and "bidaw_gateway_in_flight" in text
            assert "bidaw_kv_promotion_bytes_total" not in text and "bidaw_worker_running" not in text


def test_metrics_are_open_without_api_keys(scheduler):
    with gateway(scheduler) as gw:
        status, text = scrape(gw.port)
        assert status == 200 and "bidaw_gateway_in_flight" in text


def test_metrics_listen_serves_them_without_a_key_beside_a_keyed_api(scheduler):
    with gateway(scheduler, api_keys="t1:sk-tenant-one", metrics_listen="127.0.0.1:0") as gw:
        port = gw.gateway.metrics_port
        assert port and port != gw.port
        status, text = scrape(port)
        assert status == 200 and "bidaw_gateway_in_flight" in text
        assert "bidaw_kv_promotion_bytes_total" not in text
        assert scrape(gw.port)[0] == 401


def test_each_live_service_serves_only_its_own(deployment):
    import urllib.request

    for service, url in deployment.metrics_urls.items():
        with urllib.request.urlopen(url, timeout=30) as reply:
            exported = families(reply.read().decode())
        assert OWN[service] in exported, service
        assert not [n for other, n in OWN.items() if other != service and n in exported], \
            service
