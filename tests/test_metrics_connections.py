"""A service's /metrics port (open: it needs no token) holds a bounded number of threads, and a
silent connection is let go. Before, prometheus_client's server started a thread per
connection and kept it while the connection stayed open: 3,000 idle connections from another
local user grew a KV store to 650 threads (and growing) until they hung up."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from services.runtime import metrics, metrics_http


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("bidaw_test_total", "a test counter", registry=registry).inc()
    return registry


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_idle_connections_hold_at_most_the_cap_and_are_let_go(monkeypatch):
    monkeypatch.setattr(metrics_http, "METRICS_CONNECTIONS", 8)
    monkeypatch.setattr(metrics_http._Handler, "timeout", 1.0)
    server = metrics_http.serve_metrics("127.0.0.1", 0, _registry())
    port = server.server_port
    before = threading.active_count()
    idle = []
    try:
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
            idle.append(s)
        time.sleep(0.5)
        assert threading.active_count() <= before + 8
        # past the idle timeout every held connection is closed and its thread ends
        assert _wait(lambda: threading.active_count() <= before)
        for s in idle:
            s.settimeout(5)
            assert s.recv(1) == b""
        assert "bidaw_test_total 1.0" in _scrape(port)
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()


def test_start_metrics_server_serves_the_services_metrics():
    port = metrics.start_metrics_server("127.0.0.1:0", "store")
    assert port > 0
    assert "bidaw_kv_" in _scrape(port)  # the store's own metrics, served by the new server
