"""Prometheus metrics of every Bidaw service: module-level objects named bidaw_*.

Each process updates the ones that concern it and serves only those on /metrics
(`start_metrics_server("host:port", service)`, `registry_of(service)`; the gateway serves its
own on its HTTP port): a metric belongs to a service by its name's prefix, the turn metrics to
the gateway and the scheduler, which observe TurnSummaries. Rates come from
counters (`rate(bidaw_tokens_total{kind="completion"}[1m])` is tokens/s; a hit rate is
`rate(bidaw_kv_lookups_total{result="dram"}[5m]) / rate(bidaw_kv_lookups_total[5m])`).
Label values are small closed sets (tier, queue, kind, outcome): never a session id.
"""
from __future__ import annotations

import logging

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from services.runtime.config_checks import ListenError
from services.runtime.metrics_http import serve_metrics

log = logging.getLogger("bidaw.metrics")

# Seconds: from a sub-millisecond queue wait to a multi-minute long answer.
LATENCY_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25, 60, 120, 300)

# -- turns (observed where a TurnSummary passes: gateway, scheduler, worker) ------------------
TTFT = Histogram("bidaw_ttft_seconds", "Arrival at the scheduler to the first token, by the "
                 "tier the KV came from", ["tier"], buckets=LATENCY_BUCKETS)
TURN_LATENCY = Histogram("bidaw_turn_latency_seconds", "Arrival at the scheduler to the last "
                         "token, by KV tier", ["tier"], buckets=LATENCY_BUCKETS)
KV_LOAD = Histogram("bidaw_kv_load_seconds", "Time a turn spent reading (and converting) its "
                    "stored KV, by tier", ["tier"], buckets=LATENCY_BUCKETS)
TOKENS = Counter("bidaw_tokens", "Tokens of finished turns: prompt, cached (restored instead of "
                 "computed), computed (prompt - cached) and completion", ["kind"])
# vLLM's names of the same two counts: tools that compute a hit rate from a vLLM server's
# /metrics (ClawPerf, cache-pressure's cross-check) read these
VLLM_PREFIX_QUERIES = Counter("vllm:prefix_cache_queries", "vLLM's name for the prompt tokens "
                              "of finished turns (bidaw_tokens_total{kind=\"prompt\"})")
VLLM_PREFIX_HITS = Counter("vllm:prefix_cache_hits", "vLLM's name for the prompt tokens "
                           "restored from stored KV (bidaw_tokens_total{kind=\"cached\"})")
DECODE_RATE = Histogram("bidaw_decode_tokens_per_second", "Per turn: completion tokens / time "
                        "from first to last token", buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500,
                                                             1000, 2000, 5000))
TURNS = Counter("bidaw_turns", "Turns by outcome (ok, error, cancelled, rejected)", ["outcome"])
RECOGNISED = Counter("bidaw_session_recognition", "Turns by how their session was found: id "
                     "(named by the client), content (continues a stored conversation), "
                     "revised (continues one from its last prompt: the client resent another "
                     "answer), branch (reuses a stored conversation's common prefix in a new "
                     "session), new", ["how"])

# -- scheduler ---------------------------------------------------------------------------------
SESSION_ENDS = Counter("bidaw_scheduler_session_ends", "Conversations their client ended (EndSession, "
                       "DELETE /v1/sessions): ended, or unknown (nothing knew the id); flushed: "
                       "ended by a tenant's flush (FlushSessions, /flush_cache)",
                       ["outcome"])
SESSION_PREPARES = Counter("bidaw_scheduler_session_prepares", "Conversations their client "
                           "said would continue soon (PrepareSession, POST /v1/sessions/{id}/"
                           "prepare): promoted (an SSD->DRAM load started), in_dram (in DRAM or "
                           "loading already), or unknown (the store holds no KV of it)",
                           ["outcome"])
QUEUE_LENGTH = Gauge("bidaw_scheduler_queue_length", "Requests waiting now", ["queue"])
RUNNING = Gauge("bidaw_scheduler_running", "Turns running on workers now")
QUEUE_WAIT = Histogram("bidaw_scheduler_queue_seconds", "Time from arrival to leaving a queue",
                       ["queue"], buckets=LATENCY_BUCKETS)
SCHEDULING_DECISION = Histogram("bidaw_scheduler_decision_seconds", "Time to pick the next "
                                "request", buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, .01, .03))

# -- KV store ----------------------------------------------------------------------------------
TIER_BYTES = Gauge("bidaw_kv_tier_bytes", "Bytes of KV held now", ["tier"])
TIER_CAPACITY = Gauge("bidaw_kv_tier_capacity_bytes", "Configured capacity", ["tier"])
TIER_SESSIONS = Gauge("bidaw_kv_tier_sessions", "Sessions whose KV is in the tier now", ["tier"])
LOOKUPS = Counter("bidaw_kv_lookups", "Lookups by where the KV was found: dram, ssd, loading "
                  "or none (a miss)", ["result"])
PROMOTIONS = Counter("bidaw_kv_promotions", "SSD->DRAM promotions finished", ["outcome"])
PROMOTION_BYTES = Counter("bidaw_kv_promotion_bytes", "Bytes promoted from SSD to DRAM")
LOADS_WAITING_FOR_ROOM = Gauge("bidaw_kv_loads_waiting_for_room", "Loads parked until DRAM room "
                               "can be made: a queued turn's (demand) or a prepare's", ["kind"])
PROMOTION_TIME = Histogram("bidaw_kv_promotion_seconds", "Duration of one SSD->DRAM promotion",
                           buckets=LATENCY_BUCKETS)
PREFETCHES = Counter("bidaw_kv_prefetches", "Speculative SSD->DRAM reads (predicted returns)")
PREFETCH_BYTES = Counter("bidaw_kv_prefetch_bytes", "Bytes read from SSD speculatively")
PREFETCH_HITS = Counter("bidaw_kv_prefetch_hits", "Sessions back with their prefetched KV in DRAM")
KV_READ_BYTES = Counter("bidaw_kv_read_bytes", "Bytes of KV read by workers, by tier", ["tier"])
KV_WRITE_BYTES = Counter("bidaw_kv_write_bytes", "Bytes of KV written by workers")
EVICTIONS = Counter("bidaw_kv_evictions", "Sessions dropped from a tier", ["tier"])
EVICTION_DECISION = Histogram("bidaw_kv_eviction_decision_seconds", "Time to choose a victim",
                              buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, .01, .03))

# -- compute worker ----------------------------------------------------------------------------
WORKER_RUNNING = Gauge("bidaw_worker_running", "Turns running on this worker now")
PREFILL_TIME = Histogram("bidaw_worker_prefill_seconds", "Prefill of one turn's new tokens",
                         buckets=LATENCY_BUCKETS)
CONVERSION_TIME = Histogram("bidaw_worker_tensor6_conversion_seconds", "Tensor 6 -> K/V "
                            "conversion of one turn's restored KV", buckets=LATENCY_BUCKETS)
RESPELT = Counter("bidaw_worker_respelt", "Answers whose KV was recomputed from where their "
                  "sampled tokens differ from the next turn's spelling, and those tokens",
                  ["unit"])

# -- gateway -----------------------------------------------------------------------------------
HTTP_REQUESTS = Counter("bidaw_gateway_requests", "HTTP requests by route and status",
                        ["route", "status"])
HTTP_LATENCY = Histogram("bidaw_gateway_request_seconds", "HTTP request duration (streams: to "
                         "the last byte)", ["route"], buckets=LATENCY_BUCKETS)
HTTP_IN_FLIGHT = Gauge("bidaw_gateway_in_flight", "Chat/completion requests being served now")
HTTP_SHED = Counter("bidaw_gateway_shed", "Requests refused for overload", ["reason"])

TIER_LABELS = {0: "none", 1: "none", 2: "dram", 3: "ssd", 4: "loading"}  # common_pb2.Tier


def observe_turn(summary) -> None:
    """Record one finished turn from its TurnSummary (call it in one process per turn path)."""
    tier = TIER_LABELS.get(summary.kv_tier, "none")
    TTFT.labels(tier).observe(summary.ttft_s)
    TURN_LATENCY.labels(tier).observe(summary.latency_s)
    if summary.cached_tokens:
        KV_LOAD.labels(tier).observe(summary.kv_load_s)
    TOKENS.labels("prompt").inc(summary.prompt_tokens)
    TOKENS.labels("cached").inc(summary.cached_tokens)
    TOKENS.labels("computed").inc(summary.prompt_tokens - summary.cached_tokens)
    TOKENS.labels("completion").inc(summary.completion_tokens)
    VLLM_PREFIX_QUERIES.inc(summary.prompt_tokens)
    VLLM_PREFIX_HITS.inc(summary.cached_tokens)
    decode_s = summary.latency_s - summary.ttft_s
    if summary.completion_tokens > 1 and decode_s > 0:
        DECODE_RATE.observe((summary.completion_tokens - 1) / decode_s)
    TURNS.labels("ok").inc()


TURN_METRICS = {"bidaw_ttft_seconds", "bidaw_turn_latency_seconds", "bidaw_kv_load_seconds",
                "bidaw_tokens", "bidaw_decode_tokens_per_second", "bidaw_turns",
                "bidaw_session_recognition"}  # counted by both
SERVICE_PREFIXES = {"gateway": "bidaw_gateway_", "scheduler": "bidaw_scheduler_",
                    "store": "bidaw_kv_", "worker": "bidaw_worker_"}


def owned(name: str, service: str) -> bool:
    """Whether `service` exports the metric family `name` (process_*/python_*: every one)."""
    if name.startswith("vllm:"):  # the turn counts' vLLM names
        return service in ("gateway", "scheduler")
    if not name.startswith("bidaw_"):
        return True
    if name in TURN_METRICS:
        return service in ("gateway", "scheduler")
    return name.startswith(SERVICE_PREFIXES[service])


class _ServiceView:
    """A collector: the families of the default registry that one service exports. (Every
    metric is defined at import in every process; without this a gateway shows the store's and
    the worker's at zero.)"""

    def __init__(self, service: str):
        self.service = service

    def collect(self):
        return [f for f in REGISTRY.collect() if owned(f.name, self.service)]


_views: dict[str, CollectorRegistry] = {}


def registry_of(service: str) -> CollectorRegistry:
    if service not in _views:
        _views[service] = CollectorRegistry(auto_describe=False)
        _views[service].register(_ServiceView(service))
    return _views[service]


_servers: dict[str, int] = {}  # listen -> bound port: a second call for the same address is a no-op


def start_metrics_server(listen: str, service: str = "") -> int:
    """Serve /metrics at "host:port" (port 0: any free one) from a daemon thread: `service`'s
    metrics, all with no service; returns the port, 0 if `listen` is empty (metrics off)."""
    if not listen:
        return 0
    if listen not in _servers:
        host, _, port = listen.rpartition(":")
        try:
            server = serve_metrics(host.strip("[]") or "0.0.0.0", int(port),
                                   registry_of(service) if service else REGISTRY)
        except OSError as exc:  # `bidaw serve` names the flag
            raise ListenError("--metrics-listen", listen, exc.strerror or str(exc)) from None
        _servers[listen] = server.server_port
        log.info("Prometheus metrics on %s:%d/metrics", host or "0.0.0.0", _servers[listen])
    return _servers[listen]
