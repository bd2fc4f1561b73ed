"""Tracing: the library (off by default, on through OTEL_*), the gateway's spans, and one chat
turn traced end to end through all four services into an in-process OTLP collector."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request

import grpc

from services.runtime import tracing
from tests.otlp_collector import Collector

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_off_unless_the_environment_asks():
    assert not tracing.configured({})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"})
    assert tracing.configured({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.configured({"OTEL_TRACES_EXPORTER": "none",
                                   "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})
    assert not tracing.configured({"OTEL_SDK_DISABLED": "true",
                                   "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})


def test_off_installs_nothing():
    """This test process never called init_tracing: every hook is the identity or empty."""
    assert not tracing.enabled()
    assert tracing.span("x", session="s") is tracing.span("y")  # one shared no-op span
    with tracing.span("x") as s:
        s.set_attribute("bidaw.k", 1)
    assert tracing.inject() == {} and tracing.extract({"traceparent": "00-ab-cd-01"}) is None
    assert tracing.server_interceptors() == ()
    ch = grpc.insecure_channel("127.0.0.1:1")
    assert tracing.intercept_channel(ch) is ch
    ch.close()
    assert tracing.current_trace_id() == ""


SCRIPT = textwrap.dedent("""
    import io, json, logging, sys, urllib.request
    from services.runtime import tracing
    assert tracing.init_tracing("gateway")
    from services.runtime.gen import common_pb2, scheduler_pb2_grpc
    from services.runtime.grpc_util import channel
    from services.runtime.logs import setup_logging
    from tests.background_gateway import BackgroundGateway
    from services.gateway.config import GatewayConfig
    from tests.fake_scheduler import start_fake_scheduler

    out = {}
    server, fake = start_fake_scheduler()
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}")
    with BackgroundGateway(config) as gw:
        body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "a b"}]}
        request = urllib.request.Request(gw.url + "/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json",
                                          "X-Session-Id": "traced"})
        with urllib.request.urlopen(request) as reply:
            out["http_trace_id"] = reply.headers["x-trace-id"]
        body["stream"] = True
        request = urllib.request.Request(gw.url + "/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as reply:
            out["sse_trace_id"] = reply.headers["x-trace-id"]
            reply.read()
    with tracing.span("outer", session="s"):
        out["outer_trace_id"] = tracing.current_trace_id()
        carrier = tracing.inject()
    tracing.record_span("after", 1.0, 2.5, parent=tracing.extract(carrier), tokens=3)
    stub = scheduler_pb2_grpc.SchedulerStub(channel(f"127.0.0.1:{server.port}"))
    with tracing.span("client-root"):
        out["client_trace_id"] = tracing.current_trace_id()
        call = stub.SubmitTurn(common_pb2.TurnRequest(session_id="x", messages=[
            common_pb2.ChatMessage(role="user", content="c d")]))
        out["events"] = len(list(call))
        call.cancel()  # the Call object survives the interceptor
        logs = io.StringIO()
        setup_logging("gateway")
        logging.getLogger().handlers[0].stream = logs
        logging.getLogger("t").info("inside", extra={"session": "x"})
    out["log"] = json.loads(logs.getvalue().splitlines()[-1])
    server.stop(0)
    tracing.shutdown()
    print(json.dumps(out))
""")


def test_gateway_spans_continue_through_grpc_and_ray_style_carriers():
    with Collector() as collector:
        env = {**os.environ, **collector.env(), "PYTHONPATH": ROOT}
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        spans = collector.trace(out["http_trace_id"])
        by_name = {s.name: s for s in spans if s.kind != 3}  # kind 3: CLIENT
        root = by_name["POST /v1/chat/completions"]
        assert root.parent_id == "" and root.service == "gateway"
        assert root.attributes["bidaw.session"] == "traced"
        assert root.attributes["bidaw.tenant"] == "default"
        assert root.attributes["bidaw.completion_tokens"] == 3
        assert root.attributes["http.response.status_code"] == 200
        client = next(s for s in spans if s.kind == 3)
        assert client.name == "bidaw.v1.Scheduler/SubmitTurn" and client.parent_id == root.span_id
        server = by_name["/bidaw.v1.Scheduler/SubmitTurn"]  # opentelemetry's server span name
        assert server.parent_id == client.span_id
        assert len(spans) == 3
        assert out["sse_trace_id"] and out["sse_trace_id"] != out["http_trace_id"]
        assert {s.name for s in collector.trace(out["sse_trace_id"])} >= {
            "POST /v1/chat/completions", "bidaw.v1.Scheduler/SubmitTurn"}
        # inject() -> extract() carries the parent across a process boundary
        outer = collector.trace(out["outer_trace_id"])
        after = next(s for s in outer if s.name == "after")
        assert after.parent_id == next(s for s in outer if s.name == "outer").span_id
        assert after.end_ns - after.start_ns == 1_500_000_000 and after.attributes == {
            "bidaw.tokens": 3}
        # the sync channel's client interceptor: one client and one server span, status OK
        traced = collector.trace(out["client_trace_id"])
        assert sorted(s.name for s in traced) == [
            "/bidaw.v1.Scheduler/SubmitTurn", "bidaw.v1.Scheduler/SubmitTurn", "client-root"]
        assert out["events"] == 4
        assert out["log"]["trace_id"] == out["client_trace_id"] and out["log"]["session"] == "x"
        # health probes are never traced
        assert not any("Health" in s.name for s in collector.spans)


FOUR = {"gateway", "scheduler", "kv-store", "compute-worker"}
# What a person debugging a turn's latency needs to see (docs/observability.md lists them).
EXPECTED_SPANS = {
    "scheduler": {"scheduler.ready_queue", "scheduler.dispatch"},
    "kv-store": {"kv_store.lookup", "kv_store.read", "kv_store.write"},
    "compute-worker": {"worker.turn", "worker.kv_restore", "worker.prefill", "worker.decode",
                       "worker.kv_save"},
}


def _chat(url: str, messages: list[dict]) -> tuple[str, dict]:
    body = {"model": "smollm2-135m", "messages": messages, "max_tokens": 6, "temperature": 0}
    request = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json",
                                      "X-Session-Id": "traced-e2e"})
    with urllib.request.urlopen(request, timeout=300) as reply:
        return reply.headers["x-trace-id"], json.load(reply)


def _settled(collector: Collector, trace_id: str, quiet_s: float = 1.5, timeout: float = 40):
    """The spans of a trace once all four services reported and nothing new came for a while."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        spans = collector.trace(trace_id)
        if len(spans) != seen:
            seen, since = len(spans), time.monotonic()
        elif {s.service for s in spans} >= FOUR and time.monotonic() - since > quiet_s:
            break
        time.sleep(0.1)
    return collector.trace(trace_id)


def test_one_chat_turn_is_one_trace_through_four_services(tmp_path):
    from services.launch.launcher import LocalDeployment

    with Collector() as collector:
        dep = LocalDeployment(data_dir=str(tmp_path), dram_bytes="64MiB", default_max_tokens=8,
                              extra_env=collector.env())
        with dep:
            messages = [{"role": "user", "content": "What is the capital of France?"}]
            first_id, first = _chat(dep.gateway_url, messages)
            messages += [first["choices"][0]["message"],
                         {"role": "user", "content": "And of Spain?"}]
            trace_id, second = _chat(dep.gateway_url, messages)  # restores the stored KV
            spans = _settled(collector, trace_id)
    assert first_id != trace_id and second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert len(trace_id) == 32 and all(s.trace_id == trace_id for s in spans)
    services = {s.service for s in spans}
    assert services == FOUR, f"services in the trace: {sorted(services)}"
    ids = {s.span_id for s in spans}
    orphans = [(s.service, s.name) for s in spans if s.parent_id and s.parent_id not in ids]
    assert not orphans, f"spans whose parent is missing: {orphans}"
    roots = [s for s in spans if not s.parent_id]
    assert [(r.service, r.name) for r in roots] == [("gateway", "POST /v1/chat/completions")]
    for service, names in EXPECTED_SPANS.items():
        have = {s.name for s in spans if s.service == service}
        assert names <= have, f"{service} lacks spans {sorted(names - have)}"
