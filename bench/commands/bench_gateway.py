"""`bidaw bench gateway`: what the HTTP gateway adds to a turn, vs the scheduler's gRPC directly.

The same turn (same prompt, fresh session, fixed answer length with ignore_eos) is sent
alternately through both paths so that the machine's noise hits both alike; the figure is the
ratio of the medians. `--backend echo` swaps the model for an in-process echo scheduler, which
isolates the gateway's own cost (HTTP parsing, JSON, the extra gRPC hop).

`--tracing` instead compares throughput (turns/s, `--concurrency` clients) with tracing off and
on, exporting every span to an in-process OTLP sink, each on a freshly started deployment.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time

from services.runtime.arg_types import positive_int

PROMPT = "Write one short sentence about the sea."


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "gateway", help="gateway overhead per turn vs the scheduler's gRPC API",
        description=__doc__.split("\n\n")[1])
    p.add_argument("--backend", choices=["live", "echo"], default="live",
                   help="live: the embedded deployment with the real model; echo: no model")
    p.add_argument("--turns", type=positive_int, default=20, help="turns timed per path")
    p.add_argument("--max-tokens", type=positive_int, default=8, help="answer length (ignore_eos)")
    p.add_argument("--stream", action="store_true", help="time SSE streams instead of JSON")
    p.add_argument("--tracing", action="store_true",
                   help="tracing on vs off throughput ratio instead of the overhead")
    p.add_argument("--concurrency", type=positive_int, default=4, help="clients for --tracing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _http_turn(conn, session: str, max_tokens: int, stream: bool) -> None:
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json", "X-Session-Id": session})
    reply = conn.getresponse()
    data = reply.read()
    if reply.status != 200:
        raise RuntimeError(f"gateway answered {reply.status}: {data[:300]!r}")


def _grpc_turn(client, session: str, max_tokens: int) -> None:
    client.turn(session, [{"role": "user", "content": PROMPT}], max_tokens=max_tokens,
                ignore_eos=True)


def _echo_scheduler():
    from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
    from services.runtime.grpc_util import Server

    class Echo(scheduler_pb2_grpc.SchedulerServicer):
        def Stats(self, request, context):  # the echo stands in for the whole serving path
            return scheduler_pb2.SchedulerStats(workers=1, stores=1, awareness_connected=True)

        def SubmitTurn(self, request, context):
            for i in range(request.max_tokens or 8):
                yield common_pb2.TurnEvent(token_ids=[i], text=" tok")
            yield common_pb2.TurnEvent(summary=common_pb2.TurnSummary(
                prompt_tokens=10, completion_tokens=request.max_tokens, finish_reason="length"))

    return Server("127.0.0.1:0", [(scheduler_pb2_grpc.add_SchedulerServicer_to_server, Echo())],
                  name="bidaw.v1.Scheduler")


def _measure(scheduler: str, gateway_port: int, args) -> dict:
    import http.client

    from services.client.chat_client import ChatClient

    client = ChatClient(scheduler)
    conn = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=600)
    for i in range(3):  # warm both paths (model pages, connections)
        _grpc_turn(client, f"bench-warm-g{i}", args.max_tokens)
        _http_turn(conn, f"bench-warm-h{i}", args.max_tokens, args.stream)
    direct, gateway = [], []
    for i in range(args.turns):
        paths = [("g", direct), ("h", gateway)]
        for kind, out in (paths if i % 2 == 0 else paths[::-1]):
            start = time.perf_counter()
            if kind == "g":
                _grpc_turn(client, f"bench-{i}-g", args.max_tokens)
            else:
                _http_turn(conn, f"bench-{i}-h", args.max_tokens, args.stream)
            out.append(time.perf_counter() - start)
    conn.close()
    client.close()
    d, g = statistics.median(direct), statistics.median(gateway)
    return {"turns": args.turns, "max_tokens": args.max_tokens, "stream": args.stream,
            "direct_grpc_ms_p50": round(d * 1000, 3), "gateway_http_ms_p50": round(g * 1000, 3),
            "overhead_ms_p50": round((g - d) * 1000, 3), "ratio_p50": round(g / d, 4)}


def _throughput(gateway_port: int, args) -> float:
    """Turns per second with `--concurrency` clients sending `--turns` turns in all."""
    import http.client
    import threading

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=600)
        for i in range(k, args.turns, args.concurrency):
            _http_turn(conn, f"bench-tp-{i}", args.max_tokens, args.stream)
        conn.close()

    conn = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=600)
    for i in range(2):
        _http_turn(conn, f"bench-tp-warm-{i}", args.max_tokens, args.stream)
    conn.close()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return args.turns / (time.perf_counter() - start)


def _span_sink():
    """An OTLP/gRPC endpoint that accepts spans and counts them."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Sink(trace_service_pb2_grpc.TraceServiceServicer):
        spans = 0

        def Export(self, request, context):
            Sink.spans += sum(len(ss.spans) for rs in request.resource_spans
                              for ss in rs.scope_spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, Sink


@contextlib.contextmanager
def _echo_gateway(env: dict[str, str] | None = None):
    """(scheduler target, gateway port): a gateway process in front of an echo scheduler."""
    import os
    import subprocess

    import tempfile

    from services.runtime.cluster_auth import write_token_file
    from services.runtime.cluster_auth import ensure_token
    from services.launch.launcher import free_port, wait_http

    token = ensure_token()  # before the echo scheduler: it checks the token, the gateway sends it
    server = _echo_scheduler()
    port = free_port()
    secrets = tempfile.TemporaryDirectory(prefix="bidaw-token-")  # removed with the gateway
    token_file = os.path.join(secrets.name, "cluster-token")
    write_token_file(token_file, token)
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", "gateway",
                             "--listen", f"127.0.0.1:{port}", "--scheduler",
                             f"127.0.0.1:{server.port}", "--cluster-token-file", token_file],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 60, alive=lambda: proc.poll() is None)
        yield f"127.0.0.1:{server.port}", port
    finally:
        proc.terminate()
        proc.wait(20)
        server.stop(0)
        secrets.cleanup()


@contextlib.contextmanager
def _live_gateway(args, env: dict[str, str] | None = None):
    import tempfile

    from services.launch.launcher import LocalDeployment

    with tempfile.TemporaryDirectory(prefix="bidaw-bench-gw-") as tmp:
        with LocalDeployment(data_dir=tmp, default_max_tokens=args.max_tokens,
                             extra_env=env or {}) as dep:
            yield dep.scheduler_target, dep.gateway_port


def _tracing_ratio(args, say) -> dict:
    server, port, sink = _span_sink()
    rates = {}
    try:
        for mode in ("off", "on"):
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                   "OTEL_EXPORTER_OTLP_INSECURE": "true"} if mode == "on" else {
                "OTEL_SDK_DISABLED": "true"}
            say(f"tracing {mode}: starting ({args.backend}) ...")
            start = _echo_gateway(env) if args.backend == "echo" else _live_gateway(args, env)
            with start as (_, gateway_port):
                rates[mode] = _throughput(gateway_port, args)
                say(f"tracing {mode}: {rates[mode]:.2f} turns/s")
        time.sleep(1.0)  # the last batch of spans
    finally:
        server.stop(0)
    return {"backend": args.backend, "turns": args.turns, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
            "turns_per_s_off": round(rates["off"], 3), "turns_per_s_on": round(rates["on"], 3),
            "on_over_off": round(rates["on"] / rates["off"], 4), "spans_exported": sink.spans}


def run(args: argparse.Namespace) -> int:
    say = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    if args.tracing:
        result = _tracing_ratio(args, say)
        print(json.dumps(result) if args.json else
              f"tracing on/off throughput: {result['turns_per_s_on']:.2f} / "
              f"{result['turns_per_s_off']:.2f} turns/s = x{result['on_over_off']:.3f} "
              f"({result['spans_exported']} spans exported)")
        return 0
    say(f"starting ({args.backend}) ...")
    with _echo_gateway() if args.backend == "echo" else _live_gateway(args) as (target, port):
        say(f"timing {args.turns} turns per path ...")
        result = _measure(target, port, args)
    result = {"backend": args.backend, **result}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"gateway vs direct gRPC ({args.backend}, {args.turns} turns, {args.max_tokens} "
              f"tokens{', SSE' if args.stream else ''}): median {result['gateway_http_ms_p50']:.2f}"
              f" ms vs {result['direct_grpc_ms_p50']:.2f} ms = x{result['ratio_p50']:.3f} "
              f"(+{result['overhead_ms_p50']:.2f} ms)")
    return 0
