"""`bidaw serve store|scheduler|worker|gateway`: run one service in the foreground.

Every service gets structured logs, tracing (when OTEL_* asks for it; see docs/observability.md)
and, where its config has `metrics_listen`, a Prometheus /metrics endpoint."""
from __future__ import annotations

from dataclasses import dataclass

from compute_worker.config import WorkerConfig
from kv_store.config import StoreConfig
from scheduler.config import SchedulerConfig
from services.gateway.config import GatewayConfig
from services.runtime.config import add_config_args, load_config


@dataclass(frozen=True)
class Service:
    config: type
    env_prefix: str
    trace_name: str  # service.name of the process's spans
    help: str


SERVICES = {
    "store": Service(StoreConfig, "BIDAW_STORE_", "kv-store",
                     "the KV store: DRAM and SSD tiers, eviction, the Awareness stream"),
    "scheduler": Service(SchedulerConfig, "BIDAW_SCHEDULER_", "scheduler",
                         "the scheduler: queues turns and dispatches them"),
    "worker": Service(WorkerConfig, "BIDAW_WORKER_", "compute-worker",
                      "a compute worker: the model in a Ray actor"),
    "gateway": Service(GatewayConfig, "BIDAW_GATEWAY_", "gateway",
                       "the OpenAI-compatible HTTP API in front of the scheduler"),
}


def register(sub, groups) -> None:
    parser = sub.add_parser("serve", help="run one service in the foreground")
    services = parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name, svc in SERVICES.items():
        p = services.add_parser(name, help=svc.help,
                                description=f"{svc.help}. Every flag can also be set with "
                                f"{svc.env_prefix}<NAME> or a --config YAML file.")
        add_config_args(p, svc.config)
        p.set_defaults(func=run)


def service_config(args):
    """The config of `bidaw serve <args.service>`: defaults < --config YAML < env < flags."""
    svc = SERVICES[args.service]
    return load_config(svc.config, args, env_prefix=svc.env_prefix)


def _serve(name: str, config) -> None:
    # Imported here, not above: each service's stack (gRPC servers, Ray, torch, the HTTP app)
    # costs seconds to import, which `bidaw --help` must not pay.
    if name == "store":
        from kv_store.main import serve
    elif name == "scheduler":
        from scheduler.main import serve
    elif name == "worker":
        from compute_worker.main import serve
    else:
        from services.gateway.main import serve
    serve(config)


def run(args) -> int:
    from services.runtime.cluster_auth import configure_token
    from services.runtime.config_checks import ListenError, check_config_paths
    from services.runtime.grpc_util import keepalive_s
    from services.runtime.malloc import tune as tune_malloc
    from services.runtime.membership_auth import require_token
    from services.runtime.metrics import start_metrics_server
    from services.runtime.process import catch_stop_signals, setup_logging, stop_with_launcher
    from services.runtime.tls import TLSConfigError, TLSFiles, configure_tls
    from services.runtime.tracing import init_tracing

    catch_stop_signals()  # first: a signal during the start stops the service once it serves
    stop_with_launcher()
    try:
        config = service_config(args)
        check_config_paths(config)
    except ValueError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    try:  # before any server or channel exists; the gateway only dials (no cert needed)
        configure_tls(TLSFiles.from_config(config), server=args.service != "gateway")
    except TLSConfigError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    try:  # read and checked now, before any server or channel exists
        configure_token(require_token(config, args.service))
        keepalive_s()
    except ValueError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    setup_logging(args.service)
    try:  # before any gRPC server or channel exists
        init_tracing(SERVICES[args.service].trace_name)
    except ValueError as exc:  # an OTEL_* setting it cannot follow
        raise SystemExit(f"bidaw serve {args.service}: {exc}") from None
    try:
        if args.service != "gateway":  # the gateway serves its own, on its event loop
            start_metrics_server(getattr(config, "metrics_listen", ""), args.service)
        tune_malloc()  # long-running, many threads, varied KV-sized buffers: services/runtime/malloc.py
        _serve(args.service, config)
    except ListenError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}") from None
    return 0
