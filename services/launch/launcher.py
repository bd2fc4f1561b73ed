"""The embedded single-machine deployment: KV store, compute worker, scheduler and the HTTP
gateway as four processes on loopback, started in dependency order and stopped in reverse."""
from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

from services.runtime.cluster_auth import write_token_file
from services.gateway.config import model_flags
from services.runtime.grpc_util import configure_token, ensure_token, wait_healthy
from services.launch.supervisor import RestartPolicy, Supervisor
from services.runtime.tls import TLSFiles


def wait_http(url: str, timeout: float, alive=lambda: True) -> None:
    """Block until GET `url` answers 200; TimeoutError after `timeout` or once `alive()` fails."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or not alive():
            raise TimeoutError(f"{url} not healthy after {timeout:.0f}s")
        time.sleep(0.2)


def free_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range (32768+) and above Ray's worker ports
    (10002-19999), so nothing that binds port 0 meanwhile (Ray's own servers) can take it."""
    import random

    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError("no free port in 20000-32000")


def private_dir(path: pathlib.Path) -> pathlib.Path:
    """`path` as a directory only its owner can enter (0700), made if missing."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def private_file(path: pathlib.Path):
    """`path` opened for appending, mode 0600 (logs may quote prompts)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


@dataclass
class LocalDeployment:
    data_dir: str = "./data"
    host: str = "127.0.0.1"
    store_port: int = 0  # 0: pick a free port
    scheduler_port: int = 0
    worker_port: int = 0
    gateway_port: int = 0
    gateway_api_keys: str = ""  # tenant:key,...; passed by env so keys stay out of `ps`
    # A directory written by `bidaw certs`: every gRPC hop uses mTLS with its files.
    tls_dir: str = ""
    # The secret every internal gRPC call carries ("": this process's, made if it has none).
    # The services read it from run/cluster-token (0600 in a 0700 directory), not from `ps`,
    # and this process (a client of them: tests, benchmarks) uses it too.
    cluster_token: str = field(default="", repr=False)
    metrics: bool = True  # /metrics of store, worker and scheduler on free ports
    metrics_port_base: int = 0  # N: those /metrics on ports N, N+1, N+2 (0: free ports)
    dram_bytes: str = "2GiB"
    ssd_bytes: str = "64GiB"
    eviction: str = "bidaw-size"
    policy: str = "bidaw"
    model: str = "smollm2-135m"
    served_model_name: list[str] = field(default_factory=list)  # empty: the model's defaults
    default_max_tokens: int = 256
    use_store: bool = True  # False: workers recompute every prompt (the no-cache baseline)
    quiet: bool = True  # service logs go to data_dir/logs instead of the terminal
    # Extra flags per service, e.g. {"store": ["--promote-concurrency", "4"]}.
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    # Restart a service that dies while the deployment runs (same flags, ports, data dir).
    supervise: bool = True
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    on_restart: Callable[[str], None] | None = None  # told each exit and restart (default: log)
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def __post_init__(self):
        self.store_port = self.store_port or free_port(self.host)
        self.worker_port = self.worker_port or free_port(self.host)
        self.scheduler_port = self.scheduler_port or free_port(self.host)
        self.gateway_port = self.gateway_port or free_port(self.host)
        self.metrics_ports = {name: (self.metrics_port_base + i if self.metrics_port_base
                                     else free_port(self.host)) if self.metrics else 0
                              for i, name in enumerate(("store", "worker", "scheduler"))}
        self._commands: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.supervisor: Supervisor | None = None

    @property
    def tls(self) -> TLSFiles | None:
        """What a client of this deployment's gRPC services needs (None: plaintext)."""
        return TLSFiles.from_dir(self.tls_dir) if self.tls_dir else None

    def _security_args(self) -> list[str]:
        tls = self.tls
        return ["--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca] if tls else []

    @property
    def run_dir(self) -> pathlib.Path:
        return pathlib.Path(self.data_dir) / "run"

    @property
    def token_file(self) -> str:
        return str(self.run_dir / "cluster-token")

    def _write_token(self) -> None:
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
    def scheduler_target(self) -> str:
        return f"{self.host}:{self.scheduler_port}"

    @property
    def gateway_url(self) -> str:
        """The OpenAI base URL (what `OpenAI(base_url=...)` takes)."""
        return f"http://{self.host}:{self.gateway_port}/v1"

    @property
    def metrics_urls(self) -> dict[str, str]:
        urls = {n: f"http://{self.host}:{p}/metrics" for n, p in self.metrics_ports.items() if p}
        return {**urls, "gateway": f"http://{self.host}:{self.gateway_port}/metrics"}

    def _metrics_args(self, name: str) -> list[str]:
        port = self.metrics_ports[name]
        return ["--metrics-listen", f"{self.host}:{port}"] if port else []

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", **self.extra_env, **(env or {})}
        args = [*args, "--cluster-token-file", self.token_file, *self._security_args(),
                *self.extra_args.get(name, [])]
        self._commands[name] = ([sys.executable, "-m", "services.cli.main", "serve", name, *args], env)
        self.procs.append((name, self._launch(name)))

    def _launch(self, name: str) -> subprocess.Popen:
        """Start (or restart) a service with the command it was first given."""
        command, env = self._commands[name]
        logs = private_dir(pathlib.Path(self.data_dir) / "logs")
        out = private_file(logs / f"{name}.log") if self.quiet else None
        try:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT if out else
                                    None, env=env, start_new_session=True)
        finally:
            if out is not None:
                out.close()  # the child has its own copy

    def _relaunch(self, name: str) -> subprocess.Popen:
        proc = self._launch(name)
        self.procs[:] = [(n, proc if n == name else p) for n, p in self.procs]
        return proc

    def start(self, timeout: float = 180.0) -> "LocalDeployment":
        self._write_token()
        try:
            self._spawn("store", ["--listen", self.store_target, "--data-dir",
                                  str(pathlib.Path(self.data_dir) / "kv"), "--dram-bytes",
                                  str(self.dram_bytes), "--ssd-bytes", str(self.ssd_bytes),
                                  "--eviction", self.eviction, *self._metrics_args("store")])
            self._wait("store", self.store_target, timeout)
            self._spawn("worker", ["--listen", self.worker_target, "--store",
                                   self.store_target if self.use_store else "",
                                   "--model", self.model, "--default-max-tokens",
                                   str(self.default_max_tokens), *self._metrics_args("worker")])
            self._wait("worker", self.worker_target, timeout)
            self._spawn("scheduler", ["--listen", self.scheduler_target, "--store",
                                      self.store_target, "--workers", self.worker_target,
                                      "--policy", self.policy,
                                      *self._metrics_args("scheduler")])
            self._wait("scheduler", self.scheduler_target, timeout)
            self._spawn("gateway", ["--listen", f"{self.host}:{self.gateway_port}",
                                    "--scheduler", self.scheduler_target,
                                    *model_flags(self.model, self.served_model_name)],
                        {"BIDAW_GATEWAY_API_KEYS": self.gateway_api_keys} if self.gateway_api_keys
                        else None)
            self._wait("gateway", "", timeout)
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

    def _wait(self, name: str, target: str, timeout: float) -> None:
        proc = dict(self.procs)[name]
        try:
            if name == "gateway":
                wait_http(f"http://{self.host}:{self.gateway_port}/health", timeout,
                          alive=lambda: proc.poll() is None)
            else:
                wait_healthy(target, timeout, alive=lambda: proc.poll() is None,
                             tls=self.tls)
        except TimeoutError:
            log = pathlib.Path(self.data_dir) / "logs" / f"{name}.log"
            tail = log.read_text()[-3000:] if log.exists() else ""
            raise RuntimeError(f"{name} did not become healthy at {target}\n{tail}") from None

    def stop(self, timeout: float = 20.0) -> None:
        if self.supervisor is not None:  # first: nothing stopped on purpose is restarted
            self.supervisor.stop()
            self.supervisor = None
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> "LocalDeployment":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
