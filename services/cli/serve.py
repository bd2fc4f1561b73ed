"""`bidaw serve store|scheduler|worker|gateway`: run one service in the foreground.

Every service gets structured logs, tracing (when OTEL_* asks for it; see docs/observability.md)
and, where its config has `metrics_listen`, a Prometheus /metrics endpoint."""
from __future__ import annotations

import importlib

from services.runtime.config import add_config_args, load_config

# name -> (config class, serve function, env prefix, help)
SERVICES = {
    "store": ("kv_store.config:StoreConfig", "kv_store.main:serve", "BIDAW_STORE_",
              "the KV store: DRAM and SSD tiers, eviction, the Awareness stream"),
    "scheduler": ("scheduler.config:SchedulerConfig", "scheduler.main:serve",
                  "BIDAW_SCHEDULER_", "the scheduler: queues turns and dispatches them"),
    "worker": ("compute_worker.config:WorkerConfig", "compute_worker.main:serve",
               "BIDAW_WORKER_", "a compute worker: the model in a Ray actor"),
    "gateway": ("services.gateway.config:GatewayConfig", "services.gateway.main:serve",
                "BIDAW_GATEWAY_", "the OpenAI-compatible HTTP API in front of the scheduler"),
}
# service.name of each process's spans
TRACE_NAMES = {"store": "kv-store", "scheduler": "scheduler", "worker": "compute-worker",
               "gateway": "gateway"}


def _load(ref: str):
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def register(sub, groups) -> None:
    parser = sub.add_parser("serve", help="run one service in the foreground")
    services = parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name, (config_ref, _, env, help_text) in SERVICES.items():
        p = services.add_parser(name, help=help_text,
                                description=f"{help_text}. Every flag can also be set with "
                                f"{env}<NAME> or a --config YAML file.")
        add_config_args(p, _load(config_ref))
        p.set_defaults(func=run)


def run(args) -> int:
    from services.runtime.metrics import start_metrics_server
    from services.runtime.process import setup_logging
    from services.runtime.tracing import init_tracing

    config_ref, serve_ref, env, _ = SERVICES[args.service]
    try:
        config = load_config(_load(config_ref), args, env_prefix=env)
    except ValueError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    from services.runtime.grpc_util import configure_tls
    from services.runtime.tls import TLSConfigError, TLSFiles

    try:  # before any server or channel exists; the gateway only dials (no cert needed)
        configure_tls(TLSFiles.from_config(config), server=args.service != "gateway")
    except TLSConfigError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    from services.runtime.grpc_util import configure_token, keepalive_s
    from services.runtime.membership_auth import require_token

    try:  # read and checked now, before any server or channel exists
        configure_token(require_token(config, args.service))
        keepalive_s()
    except ValueError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    setup_logging(args.service)
    init_tracing(TRACE_NAMES[args.service])  # before any gRPC server or channel exists
    if args.service != "gateway":  # the gateway serves its own, on its event loop
        start_metrics_server(getattr(config, "metrics_listen", ""), args.service)
    from services.runtime.malloc import tune as tune_malloc

    tune_malloc()  # long-running, many threads, varied KV-sized buffers: see services/runtime/malloc.py
    _load(serve_ref)(config)
    return 0
