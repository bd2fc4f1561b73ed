"""The one launcher of local deployments: KV store, compute worker(s), scheduler and (optionally)
the HTTP gateway, each a `bidaw serve` process on loopback, started in dependency order (the
workers, slow to load their model, beside the store) and stopped in reverse. `bidaw up`, the
demo, load, live replay, the benchmarks and the chaos runner (bench/chaos/topology.py) all
start theirs here.

The services' settings are fields of their config types (kv_store/config.py StoreConfig and the
others): the defaults below are those types' own, and every flag passed is built from a field
name by services.runtime.config.config_flags, so a misspelt setting fails here, not in a child."""
from __future__ import annotations

import os
import pathlib
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from compute_worker.config import WorkerConfig
from kv_store.config import StoreConfig
from scheduler.config import SchedulerConfig
from services.gateway.config import GatewayConfig, model_flags
from services.launch.service_process import (ServiceProcess, free_port, lock_data_dir,
                                             port_in_use, private_dir, private_file, wait_http)
from services.launch.supervisor import RestartPolicy, Supervisor
from services.runtime.cluster_auth import (cluster_token as process_token, configure_token,
                                           ensure_token, write_token_file)
from services.runtime.config import config_flags, field_default
from services.runtime.tls import TLSFiles

__all__ = ["LocalDeployment", "free_port", "private_dir", "private_file", "wait_http"]
CONFIGS = {"store": StoreConfig, "worker": WorkerConfig, "scheduler": SchedulerConfig,
           "gateway": GatewayConfig}


@dataclass
class LocalDeployment:
    data_dir: str  # logs/, run/ (the cluster token), kv/ (the SSD tier) unless store_data_dir,
    # scheduler/ (the conversation index's journal)
    host: str = "127.0.0.1"
    store_port: int = 0  # 0: pick a free port
    scheduler_port: int = 0
    worker_port: int = 0  # the first worker's
    gateway_port: int = 0
    workers: int = 1  # compute workers: "worker" when one, else "worker0", "worker1", ...
    gateway: bool = True  # False: no HTTP gateway (clients dial the scheduler)
    gateway_api_keys: str = ""  # tenant:key,...; passed by env so keys stay out of `ps`
    # A directory written by `bidaw certs`: every gRPC hop uses mTLS with its files.
    tls_dir: str = ""
    # The secret every internal gRPC call carries ("": this process's, made if it has none).
    # The services read it from run/cluster-token (0600 in a 0700 directory), not from `ps`,
    # and this process (a client of them: tests, benchmarks) uses it too.
    cluster_token: str = field(default="", repr=False)
    metrics: bool = True  # /metrics of store, worker(s) and scheduler on free ports
    metrics_port_base: int = 0  # N: those /metrics on ports N, N+1, N+2 (0: free ports)
    dram_bytes: str | int = field_default(StoreConfig, "dram_bytes")
    ssd_bytes: str | int = field_default(StoreConfig, "ssd_bytes")
    eviction: str = field_default(StoreConfig, "eviction")
    store_data_dir: str = ""  # the store's SSD tier ("": data_dir/kv)
    scheduler_store: str = ""  # what the scheduler dials for the store ("": the store; a proxy)
    policy: str = field_default(SchedulerConfig, "policy")
    model: str = field_default(WorkerConfig, "model")
    served_model_name: list[str] = field(default_factory=list)  # empty: the model's defaults
    default_max_tokens: int = field_default(WorkerConfig, "default_max_tokens")
    dtype: str = ""  # the workers' --dtype ("": their own, $BIDAW_WORKER_DTYPE or auto)
    use_store: bool = True  # False: workers recompute every prompt (the no-cache baseline)
    quiet: bool = True  # service logs go to data_dir/logs instead of the terminal
    # Extra flags per service kind, e.g. {"store": ["--promote-concurrency", "4"]}.
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    # Restart a service that dies while the deployment runs (same flags, ports, data dir).
    supervise: bool = True
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    on_restart: Callable[[str], None] | None = None  # told each exit and restart (default: log)
    # This process's token before start installed ours: stop() puts it back, so a later
    # deployment in the same process (tests) makes its own instead of inheriting a stale one.
    _prior_token: str | None = field(default=None, init=False, repr=False)
    _lock_fd: int = field(default=-1, init=False, repr=False)  # data_dir is ours while held

    def __post_init__(self):
        self.store_data_dir = self.store_data_dir or str(pathlib.Path(self.data_dir) / "kv")
        self.store_port = self.store_port or free_port(self.host)
        names = self.worker_names()
        self.worker_ports = [self.worker_port or free_port(self.host)] + [
            free_port(self.host) for _ in names[1:]]
        self.worker_port = self.worker_ports[0]
        self.scheduler_port = self.scheduler_port or free_port(self.host)
        self.gateway_port = self.gateway_port or free_port(self.host)
        self.metrics_ports = {name: (self.metrics_port_base + i if self.metrics_port_base
                                     else free_port(self.host)) if self.metrics else 0
                              for i, name in enumerate(("store", *names, "scheduler"))}
        self.services: dict[str, ServiceProcess] = {}
        self.supervisor: Supervisor | None = None

    def worker_names(self) -> list[str]:
        return ["worker"] if self.workers == 1 else [f"worker{i}" for i in range(self.workers)]

    @property
    def procs(self) -> list[tuple[str, subprocess.Popen]]:
        """(name, process) of every service running, in start order."""
        return [(n, s.proc) for n, s in self.services.items() if s.proc is not None]

    @property
    def tls(self) -> TLSFiles | None:
        """What a client of this deployment's gRPC services needs (None: plaintext)."""
        return TLSFiles.from_dir(self.tls_dir) if self.tls_dir else None

    @property
    def run_dir(self) -> pathlib.Path:
        return pathlib.Path(self.data_dir) / "run"

    @property
    def token_file(self) -> str:
        return str(self.run_dir / "cluster-token")

    def _write_token(self) -> None:
        self._prior_token = process_token()
        if self.cluster_token:
            configure_token(self.cluster_token)  # its clients here must send it
        else:
            self.cluster_token = ensure_token()
        private_dir(pathlib.Path(self.data_dir))
        private_dir(self.run_dir)
        write_token_file(self.token_file, self.cluster_token, overwrite=True)

    @property
    def store_target(self) -> str:
        return f"{self.host}:{self.store_port}"

    @property
    def worker_target(self) -> str:
        return f"{self.host}:{self.worker_port}"

    @property
    def worker_targets(self) -> list[str]:
        return [f"{self.host}:{p}" for p in self.worker_ports]

    @property
    def scheduler_target(self) -> str:
        return f"{self.host}:{self.scheduler_port}"

    @property
    def gateway_url(self) -> str:
        """The OpenAI base URL (what `OpenAI(base_url=...)` takes)."""
        return f"http://{self.host}:{self.gateway_port}/v1"

    @property
    def metrics_urls(self) -> dict[str, str]:
        urls = {n: f"http://{self.host}:{p}/metrics" for n, p in self.metrics_ports.items() if p}
        return {**urls, "gateway": f"http://{self.host}:{self.gateway_port}/metrics"} \
            if self.gateway else urls

    def _metrics_args(self, name: str) -> list[str]:
        port = self.metrics_ports[name]
        return ["--metrics-listen", f"{self.host}:{port}"] if port else []

    def _settings(self) -> list[tuple[str, str, int, dict]]:
        """(name, kind, port, config field values) of every service, in start order."""
        store = {"data_dir": self.store_data_dir, "dram_bytes": self.dram_bytes,
                 "ssd_bytes": self.ssd_bytes, "eviction": self.eviction}
        worker = {"store": self.store_target if self.use_store else "", "model": self.model,
                  "default_max_tokens": self.default_max_tokens}
        if self.dtype:
            worker["dtype"] = self.dtype
        scheduler = {"store": self.scheduler_store or self.store_target,
                     "workers": self.worker_targets, "policy": self.policy,
                     "state_dir": str(pathlib.Path(self.data_dir) / "scheduler")}
        return [("store", "store", self.store_port, store),
                *((n, "worker", p, worker) for n, p in zip(self.worker_names(),
                                                           self.worker_ports)),
                ("scheduler", "scheduler", self.scheduler_port, scheduler),
                *([("gateway", "gateway", self.gateway_port,
                    {"scheduler": self.scheduler_target})] if self.gateway else [])]

    def _service(self, name: str, kind: str, port: int, values: dict) -> ServiceProcess:
        tls = self.tls
        args = [*config_flags(CONFIGS[kind], listen=f"{self.host}:{port}", **values,
                              cluster_token_file=self.token_file),
                *(config_flags(CONFIGS[kind], tls_cert=tls.cert, tls_key=tls.key, tls_ca=tls.ca)
                  if tls else []),
                *(self._metrics_args(name) if kind != "gateway" else
                  model_flags(self.model, self.served_model_name)),
                *self.extra_args.get(kind, [])]
        env = {**self.extra_env}
        if kind == "gateway" and self.gateway_api_keys:
            env["BIDAW_GATEWAY_API_KEYS"] = self.gateway_api_keys
        return ServiceProcess(name, kind, args, self.host, port,
                              private_dir(pathlib.Path(self.data_dir) / "logs") / f"{name}.log",
                              env, self.quiet)

    def start(self, timeout: float = 180.0) -> "LocalDeployment":
        if self.services:  # a second copy of each service would crash-loop on its ports
            raise RuntimeError("this deployment is already started")
        taken = [f"{port} ({name})" for name, _, port, _ in self._settings()
                 if port_in_use(self.host, port)]
        if taken:  # a gRPC server would start there anyway and share the port with the other
            raise RuntimeError(f"{'ports' if len(taken) > 1 else 'port'} {', '.join(taken)} "
                               f"on {self.host} in use: another deployment, or a service left "
                               "running?")
        self._lock_fd = lock_data_dir(self.run_dir)  # before the token file is rewritten
        self._write_token()
        try:
            for name, kind, port, values in self._settings():
                self.services[name] = self._service(name, kind, port, values)
            self._launch_all(timeout)
            if self.supervise:
                self.supervisor = Supervisor(self._relaunch, self.restart_policy,
                                             self.on_restart)
                for name, proc in self.procs:
                    self.supervisor.watch(name, proc)
                self.supervisor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch_all(self, timeout: float) -> None:
        """A worker loads its model for most of a start, so the workers start with the store,
        and the scheduler and the gateway once the store serves (the scheduler's Awareness
        stream dials the store at once). The start ends when the scheduler has heard from every
        worker (it asks them every 2 s) and the gateway's /health is true: a turn sent then
        finds a worker."""
        of = lambda kind: [s for s in self.services.values() if s.kind == kind]  # noqa: E731
        for svc in (*of("store"), *of("worker")):
            svc.launch()
        for svc in of("store"):
            svc.wait_ready(timeout, self.tls)
        for svc in (*of("scheduler"), *of("gateway")):
            svc.launch()
        for svc in (*of("scheduler"), *of("worker")):
            svc.wait_ready(timeout, self.tls)
        if of("scheduler"):
            self.wait_workers_seen(timeout)
        for svc in of("gateway"):
            svc.wait_ready(timeout, self.tls)

    def wait_workers_seen(self, timeout: float = 60.0) -> None:
        """Until the scheduler has heard from every worker (it asks them every 2 s)."""
        from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
        from services.runtime.grpc_util import channel

        workers = len(self.worker_names())
        deadline = time.monotonic() + timeout
        with channel(self.scheduler_target, self.tls) as ch:
            stub = scheduler_pb2_grpc.SchedulerStub(ch)
            while (seen := stub.Stats(scheduler_pb2.SchedulerStatsRequest(),
                                      timeout=10).workers) < workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the scheduler saw {seen} of {workers} workers serve "
                                       f"after {timeout:.0f} s")
                time.sleep(0.1)

    def _relaunch(self, name: str) -> subprocess.Popen:
        return self.services[name].launch()

    def kill9(self, name: str, group: bool = True) -> None:
        """SIGKILL service `name` (with `group`: and everything it started, e.g. its Ray)."""
        self.services[name].kill9(group)

    def restart(self, name: str, timeout: float = 240.0) -> None:
        """Start service `name` again with its flags, port and data directory (unsupervised)."""
        svc = self.services[name]
        svc.launch()
        svc.wait_ready(timeout, self.tls)

    def stop(self, timeout: float = 20.0) -> None:
        if self.supervisor is not None:  # first: nothing stopped on purpose is restarted
            self.supervisor.stop()
            self.supervisor = None
        # The gateway first, alone: told to stop, it answers new turns 503 and lets the running
        # ones finish (its drain), which needs the scheduler, workers and store still serving.
        # Stopped together, the scheduler left after its 2-s grace and every streaming client
        # got "the serving backend is unavailable" mid-answer. The KV store last: it refuses new
        # writes once told to stop (its drain), and the turns the workers finish still write
        # their KV; it gets a few seconds past its own 20-s drain bound to land its SSD copies.
        # Each drain is bounded by `timeout`.
        services = list(reversed(self.services.values()))
        for group, grace in (([s for s in services if s.kind == "gateway"], 0),
                             ([s for s in services if s.kind not in ("gateway", "store")], 0),
                             ([s for s in services if s.kind == "store"], 5)):
            for svc in group:
                svc.terminate()
            for svc in group:
                svc.reap(timeout + grace)
        # Give back the token this process had before, but never "none": another deployment
        # started meanwhile in this process may still run on the made one (ensure_token shared
        # it), and its clients here would then be refused.
        if self._prior_token:
            configure_token(self._prior_token)
        self._prior_token = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> "LocalDeployment":
        return self if self.services else self.start()  # `with dep.start(timeout=...)` too

    def __exit__(self, *exc) -> None:
        self.stop()
