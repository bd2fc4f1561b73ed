"""`bidaw serve store|scheduler|worker`: run one service in the foreground."""
from __future__ import annotations

import importlib

from services.config import add_config_args, load_config

# name -> (config class, serve function, env prefix, help)
SERVICES = {
    "store": ("kv_store.config:StoreConfig", "kv_store.main:serve", "BIDAW_STORE_",
              "the KV store: DRAM and SSD tiers, eviction, the Awareness stream"),
    "scheduler": ("scheduler.config:SchedulerConfig", "scheduler.main:serve",
                  "BIDAW_SCHEDULER_", "the scheduler: queues turns and dispatches them"),
    "worker": ("compute_worker.config:WorkerConfig", "compute_worker.main:serve",
               "BIDAW_WORKER_", "a compute worker: the model in a Ray actor"),
}


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
    from services.runtime import setup_logging

    config_ref, serve_ref, env, _ = SERVICES[args.service]
    try:
        config = load_config(_load(config_ref), args, env_prefix=env)
    except ValueError as exc:
        raise SystemExit(f"bidaw serve {args.service}: {exc}")
    setup_logging(args.service)
    _load(serve_ref)(config)
    return 0
