"""The gateway's /health against a real scheduler API server: 503 with the reason while a
dependency of the serving path is missing, 200 once it is back, the verdict cached briefly."""
from __future__ import annotations

import http.client
import json

import pytest

from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from services.runtime.gen import scheduler_pb2
from tests.fake_scheduler import start_fake_scheduler


@pytest.fixture
def fake():
    server, scheduler = start_fake_scheduler()
    yield server, scheduler
    server.stop(0)


def _health(gw) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("GET", "/health")
    reply = conn.getresponse()
    body = json.loads(reply.read())
    conn.close()
    return reply.status, body


def _gateway(server, cache_s: float) -> BackgroundGateway:
    return BackgroundGateway(GatewayConfig(listen="127.0.0.1:0",
                                           scheduler=f"127.0.0.1:{server.port}",
                                           health_cache_s=cache_s))


@pytest.mark.parametrize("broken, reason", [
    (dict(workers=0), "no healthy compute worker"),
    (dict(stores=0, awareness_connected=False), "no KV store known to the scheduler"),
    (dict(awareness_connected=False), "Awareness stream to the KV store is disconnected"),
])
def test_missing_dependency_gives_503_with_reason_then_200(fake, broken, reason):
    server, scheduler = fake
    scheduler.stats = scheduler_pb2.SchedulerStats(
        **{"workers": 1, "stores": 1, "awareness_connected": True, **broken})
    with _gateway(server, 0.0) as gw:
        status, body = _health(gw)
        assert status == 503
        assert body["error"]["code"] == "unavailable" and reason in body["error"]["message"]
        scheduler.stats = scheduler_pb2.SchedulerStats(workers=1, stores=1,
                                                       awareness_connected=True)
        assert _health(gw) == (200, {"status": "ok"})


def test_verdict_is_cached(fake):
    server, scheduler = fake
    with _gateway(server, 60.0) as gw:
        assert _health(gw)[0] == 200
        scheduler.stats = scheduler_pb2.SchedulerStats(workers=0, stores=1,
                                                       awareness_connected=True)
        for _ in range(5):
            assert _health(gw)[0] == 200  # the cached verdict: Stats not asked again
        assert scheduler.stats_calls == 1
