"""A tests/cluster-style topology for fault injection: a KV store, N compute workers, a scheduler,
each its own process on loopback, each restartable on the same port (and the store on the same
data directory), so clients that retry find the service again where it was.

`supervised=True` runs `bidaw up`'s deployment instead (services.launch.launcher.LocalDeployment, one
worker, plus the gateway), whose supervisor restarts what dies: nobody here restarts anything."""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from dataclasses import dataclass, field

from services.runtime.cluster_auth import write_token_file
from services.runtime.grpc_util import ensure_token, wait_healthy
from services.launch.launcher import LocalDeployment, free_port, private_dir
from services.launch.supervisor import RestartPolicy


@dataclass
class Service:
    name: str
    args: list[str]
    port: int
    log: pathlib.Path
    proc: subprocess.Popen | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Topology:
    data_dir: str
    workers: int = 1
    dram_bytes: str = "4MiB"  # a SmolLM2 conversation past ~91 tokens lives on SSD
    model: str = "smollm2-135m"
    store_flags: list[str] = field(default_factory=list)
    store_data_dir: str = ""   # default: data_dir/kv
    scheduler_store: str = ""  # what the scheduler dials for the store (a proxy, say)
    env: dict[str, str] = field(default_factory=dict)  # extra environment of every service
    services: dict[str, Service] = field(default_factory=dict)
    supervised: bool = False
    deployment: LocalDeployment | None = None

    def __post_init__(self):
        root = pathlib.Path(self.data_dir)
        (root / "logs").mkdir(parents=True, exist_ok=True)
        (root / "shm").mkdir(parents=True, exist_ok=True)
        self.store_data_dir = self.store_data_dir or str(root / "kv")
        self.store_port = free_port()
        self.worker_ports = [free_port() for _ in range(self.workers)]
        self.scheduler_port = free_port()
        # Every service, and this process as their client, use this process's cluster token.
        self.token_file = str(private_dir(root / "run") / "cluster-token")
        write_token_file(self.token_file, ensure_token(), overwrite=True)

    @property
    def store_target(self) -> str:
        return f"127.0.0.1:{self.store_port}"

    @property
    def scheduler_target(self) -> str:
        return f"127.0.0.1:{self.scheduler_port}"

    def _add(self, name: str, kind: str, port: int, flags: list[str]) -> Service:
        svc = Service(name, ["serve", kind, "--listen", f"127.0.0.1:{port}",
                             "--cluster-token-file", self.token_file, *flags], port,
                      pathlib.Path(self.data_dir) / "logs" / f"{name}.log")
        self.services[name] = svc
        return svc

    def start(self, timeout: float = 240.0) -> "Topology":
        if self.supervised:
            return self._start_supervised(timeout)
        self._add("store", "store", self.store_port, [
            "--data-dir", self.store_data_dir, "--dram-bytes", self.dram_bytes,
            "--shm-dir", str(pathlib.Path(self.data_dir) / "shm"), *self.store_flags])
        for i, port in enumerate(self.worker_ports):
            self._add(f"worker{i}", "worker", port, [
                "--store", self.store_target, "--model", self.model, "--threads", "1",
                "--ray-num-cpus", "1"])
        self._add("scheduler", "scheduler", self.scheduler_port, [
            "--store", self.scheduler_store or self.store_target, "--workers",
            ",".join(f"127.0.0.1:{p}" for p in self.worker_ports), "--heartbeat-s", "0.5"])
        try:
            for name in self.services:
                self.launch(name)
                self.wait(name, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_supervised(self, timeout: float) -> "Topology":
        if self.workers != 1 or self.scheduler_store:
            raise ValueError("a supervised topology has one worker and no proxy")
        self.deployment = LocalDeployment(
            data_dir=self.data_dir, dram_bytes=self.dram_bytes, model=self.model,
            store_port=self.store_port, worker_port=self.worker_ports[0],
            scheduler_port=self.scheduler_port, metrics=False,
            restart_policy=RestartPolicy(first_delay_s=0.2, healthy_s=10.0),
            extra_args={"store": ["--shm-dir", str(pathlib.Path(self.data_dir) / "shm"),
                                  *self.store_flags],
                        "worker": ["--threads", "1", "--ray-num-cpus", "1"],
                        "scheduler": ["--heartbeat-s", "0.5"]})
        self.deployment.start(timeout)
        return self

    def launch(self, name: str) -> None:
        svc = self.services[name]
        with open(svc.log, "ab") as log:
            svc.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", *svc.args], stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "RAY_AUTH_MODE": "disabled", **self.env})

    def wait(self, name: str, timeout: float = 240.0) -> None:
        svc = self.services[name]
        try:
            wait_healthy(svc.target, timeout, alive=svc.alive)
        except TimeoutError:
            tail = svc.log.read_text(errors="replace")[-2000:] if svc.log.exists() else ""
            raise RuntimeError(f"{name} not healthy at {svc.target}\n{tail}") from None

    def kill9(self, name: str, group: bool = True) -> None:
        """SIGKILL: the process (and, with `group`, everything it started, e.g. its Ray)."""
        svc = self.services[name]
        if not svc.alive():
            return
        try:
            if group:
                os.killpg(svc.pid, signal.SIGKILL)
            else:
                os.kill(svc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        svc.proc.wait()

    def restart(self, name: str, timeout: float = 240.0) -> None:
        """Start the service again with the same flags, port and data directory."""
        self.launch(name)
        self.wait(name, timeout)

    def stop(self, timeout: float = 20.0) -> None:
        if self.deployment is not None:
            self.deployment.stop(timeout)
        for svc in reversed(list(self.services.values())):
            if svc.alive():
                try:
                    os.kill(svc.pid, signal.SIGCONT)  # in case a fault left it stopped
                    svc.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for svc in reversed(list(self.services.values())):
            if svc.proc is None:
                continue
            try:
                svc.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever it left behind (Ray) goes too
                os.killpg(svc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            svc.proc.wait()

    def __enter__(self) -> "Topology":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
