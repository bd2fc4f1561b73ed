"""`bidaw up`: the embedded single-machine deployment, until Ctrl-C."""
from __future__ import annotations


def register(sub, groups) -> None:
    p = sub.add_parser("up", help="run KV store, compute worker, scheduler and the OpenAI API "
                       "on this machine",
                       description="Start the KV store, one compute worker (on a local Ray), "
                       "the scheduler and the OpenAI-compatible gateway as processes on "
                       "loopback; a service that crashes is restarted on its port (with "
                       "backoff); Ctrl-C stops them cleanly. API keys: set "
                       "BIDAW_GATEWAY_API_KEYS=tenant:key,... (without keys the API is open "
                       "and served on loopback only).")
    p.add_argument("--data-dir", default="./data", help="SSD tier and logs (default: ./data)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on")
    p.add_argument("--port", type=int, default=8000,
                   help="OpenAI-compatible HTTP port: http://HOST:PORT/v1")
    p.add_argument("--scheduler-port", type=int, default=50052, help="scheduler gRPC port")
    p.add_argument("--store-port", type=int, default=50051, help="KV store gRPC port")
    p.add_argument("--worker-port", type=int, default=50053, help="compute worker gRPC port")
    p.add_argument("--metrics-port-base", type=int, default=0, metavar="N", help="/metrics of the KV store, "
                   "worker and scheduler on ports N, N+1, N+2 (the gateway's is on --port; "
                   "default 0: free ports, printed at start)")
    p.add_argument("--dram-bytes", default="2GiB", help="DRAM tier capacity")
    p.add_argument("--ssd-bytes", default="64GiB", help="SSD tier capacity")
    p.add_argument("--eviction", default="bidaw-size",
                   help="DRAM eviction policy: bidaw-size, bidaw, lru, fifo, queue-aware")
    p.add_argument("--policy", default="bidaw", choices=["fcfs", "bidaw"],
                   help="scheduling policy")
    p.add_argument("--model", default="smollm2-135m", help="model to serve")
    p.add_argument("--served-model-name", nargs="+", default=[], metavar="NAME",
                   help="names the API answers to, as vLLM's (the first is reported; "
                   "default: the model's short name and, for the stock model, its HF repo id)")
    p.add_argument("--tls-dir", default="", help="directory from `bidaw certs`: mTLS on every "
                   "gRPC hop (default: plaintext on loopback)")
    p.add_argument("--verbose", action="store_true", help="service logs on the terminal")
    p.set_defaults(func=run)


def run(args) -> int:
    from services.launch.launcher import LocalDeployment
    from services.runtime.process import wait_for_signal

    dep = LocalDeployment(data_dir=args.data_dir, host=args.host, store_port=args.store_port,
                          scheduler_port=args.scheduler_port, worker_port=args.worker_port,
                          gateway_port=args.port, metrics_port_base=args.metrics_port_base,
                          dram_bytes=args.dram_bytes, ssd_bytes=args.ssd_bytes,
                          eviction=args.eviction, policy=args.policy, model=args.model,
                          served_model_name=args.served_model_name,
                          tls_dir=args.tls_dir, quiet=not args.verbose,
                          on_restart=lambda line: print(f"[supervisor] {line}", flush=True))
    print("starting KV store, compute worker, scheduler, gateway ...", flush=True)
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
