"""`bidaw up`: the embedded single-machine deployment, until Ctrl-C."""
from __future__ import annotations

from compute_worker.config import WorkerConfig
from kv_store.config import StoreConfig
from scheduler.config import SchedulerConfig
from services.gateway.config import GatewayConfig
from services.runtime.arg_types import port
from services.runtime.config import field_default, field_help

# (flag, config type, field): settings of one service that `bidaw up` passes on when given
SERVICE_OPTIONS = [("--dram-bytes", StoreConfig, "dram_bytes"),
                   ("--ssd-bytes", StoreConfig, "ssd_bytes"),
                   ("--eviction", StoreConfig, "eviction"),
                   ("--policy", SchedulerConfig, "policy"),
                   ("--model", WorkerConfig, "model"),
                   ("--default-max-tokens", WorkerConfig, "default_max_tokens")]


def _listen(config: type) -> tuple[str, int]:
    """The host and port of a service's default --listen: `bidaw up` serves on the usual ones."""
    host, port = field_default(config, "listen").rsplit(":", 1)
    return host, int(port)


def register(sub, groups) -> None:
    p = sub.add_parser("up", help="run KV store, compute worker, scheduler and the OpenAI API "
                       "on this machine",
                       description="Start the KV store, one compute worker (on a local Ray), "
                       "the scheduler and the OpenAI-compatible gateway as processes on "
                       "loopback; a service that crashes is restarted on its port (with "
                       "backoff); Ctrl-C stops them cleanly. API keys: set "
                       "BIDAW_GATEWAY_API_KEYS=tenant:key,... (without keys the API is open "
                       "and served on loopback only).")
    p.add_argument("--data-dir", default="./data", help="SSD tier and logs")
    p.add_argument("--host", default=_listen(GatewayConfig)[0], help="address to serve on")
    p.add_argument("--port", type=port, default=_listen(GatewayConfig)[1],
                   help="OpenAI-compatible HTTP port: http://HOST:PORT/v1")
    p.add_argument("--scheduler-port", type=port, default=_listen(SchedulerConfig)[1],
                   help="scheduler gRPC port")
    p.add_argument("--store-port", type=port, default=_listen(StoreConfig)[1],
                   help="KV store gRPC port")
    p.add_argument("--worker-port", type=port, default=_listen(WorkerConfig)[1],
                   help="compute worker gRPC port")
    p.add_argument("--metrics-port-base", type=port, default=0, metavar="N",
                   help="/metrics of the KV store, "
                   "worker and scheduler on ports N, N+1, N+2 (the gateway's is on --port; "
                   "default 0: free ports, printed at start)")
    # Given only when set: the services' own defaults (their config types) apply otherwise.
    for flag, cls, name in SERVICE_OPTIONS:
        p.add_argument(flag, dest=name, default=None, help=field_help(cls, name))
    p.add_argument("--served-model-name", nargs="+", default=[], metavar="NAME",
                   help="names the API answers to, as vLLM's (the first is reported; "
                   "default: the model's short name and, for the stock model, its HF repo id)")
    p.add_argument("--tls-dir", default="", help="directory from `bidaw certs`: mTLS on every "
                   "gRPC hop (default: plaintext on loopback)")
    p.add_argument("--verbose", action="store_true", help="service logs on the terminal")
    p.set_defaults(func=run)


def run(args) -> int:
    from services.launch.launcher import LocalDeployment
    from services.runtime.config_checks import dir_problem
    from services.runtime.process import wait_for_signal

    problem = dir_problem(args.data_dir)
    if problem:
        raise SystemExit(f"bidaw up: --data-dir {args.data_dir}: {problem}")
    given = {name: getattr(args, name) for _, _, name in SERVICE_OPTIONS
             if getattr(args, name) is not None}
    problem = preflight(args, given)
    if problem:
        raise SystemExit(f"bidaw up: {problem}")
    dep = LocalDeployment(data_dir=args.data_dir, host=args.host, store_port=args.store_port,
                          scheduler_port=args.scheduler_port, worker_port=args.worker_port,
                          gateway_port=args.port, metrics_port_base=args.metrics_port_base,
                          served_model_name=args.served_model_name, **given,
                          tls_dir=args.tls_dir, quiet=not args.verbose,
                          on_restart=lambda line: print(f"[supervisor] {line}", flush=True))
    print("starting KV store, compute worker, scheduler, gateway ...", flush=True)
    try:
        dep.start()
    except RuntimeError as exc:  # a port in use, a service that did not become healthy
        raise SystemExit(f"bidaw up: {exc}")
    with dep:
        print(f"OpenAI API {dep.gateway_url}   (OpenAI(base_url=..., api_key=...); "
              f"bidaw chat --target {dep.gateway_url})")
        tls = f" --tls-dir {args.tls_dir}" if args.tls_dir else ""
        print(f"scheduler  {dep.scheduler_target}   (bidaw chat --target "
              f"{dep.scheduler_target} --cluster-token-file {dep.token_file}{tls})")
        print(f"KV store   {dep.store_target}\nworker     {dep.worker_target}")
        print("metrics    " + "  ".join(f"{n} {u}" for n, u in dep.metrics_urls.items()))
        print(f"internal gRPC needs the cluster token in {dep.token_file} (new for this run)")
        print(f"logs in {args.data_dir}/logs; Ctrl-C to stop", flush=True)
        wait_for_signal()
        print("stopping ...", flush=True)
    return 0


def preflight(args, given: dict) -> str | None:
    """What would stop a service, said before any starts (a traceback from a child, or a wait
    on a port the wrong service holds, before): the settings passed on, --host, the ports, the
    --tls-dir files. None if all can work."""
    from services.runtime.config import load_config
    from services.runtime.config_checks import listen_problem
    from services.runtime.tls import TLSConfigError, TLSFiles, load as load_tls

    for flag, cls, name in SERVICE_OPTIONS:
        if name in given:
            try:
                load_config(cls, **{name: given[name]})
            except ValueError as exc:  # "--eviction must be ..." or "--dram-bytes: not a size"
                said = str(exc).removeprefix(flag + ": ")
                return said if said.startswith(flag) else f"{flag} {given[name]}: {said}"
    problem = listen_problem(f"{args.host}:0")
    if problem:
        return f"--host {args.host}: {problem}"
    ports = {"--port": args.port, "--scheduler-port": args.scheduler_port,
             "--store-port": args.store_port, "--worker-port": args.worker_port}
    if args.metrics_port_base:
        ports.update({f"--metrics-port-base (+{i})": args.metrics_port_base + i
                      for i in range(3)})
    seen: dict[int, str] = {}
    for flag, number in ports.items():
        if number in seen:
            return f"{flag} {number}: also {seen[number]}'s; each service needs its own port"
        if number > 65535:
            return f"{flag}: port {number} is past 65535"
        seen[number] = flag
    if args.tls_dir:
        try:
            load_tls(TLSFiles.from_dir(args.tls_dir), server=True)
        except TLSConfigError as exc:
            return (f"--tls-dir {args.tls_dir}: {exc} (`bidaw certs --out DIR` makes the "
                    "directory)")
    return None
