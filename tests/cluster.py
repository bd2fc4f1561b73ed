"""Services as separate processes for multi-node tests on loopback (more than `bidaw up` runs).
Each gets the test process's cluster token (made on first use) by file, as `bidaw up` does, so
the test's own clients (services.runtime.grpc_util.channel) are authenticated with it."""
from __future__ import annotations

import os
import pathlib

from services.launch.service_process import ServiceProcess as Launched, free_port
from services.runtime.cluster_auth import ensure_token, write_token_file


def token_file(directory) -> str:
    """A 0600 file in `directory` holding this process's cluster token."""
    path = os.path.join(directory, "cluster-token")
    write_token_file(path, ensure_token(), overwrite=True)
    return path


class ServiceProcess:
    """`bidaw serve KIND --listen` a free port, started at once (the launcher's process)."""

    def __init__(self, kind: str, log_dir, *flags: str, env: dict | None = None):
        self.kind = kind
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"{kind}-{self.port}.log")
        self._service = Launched(kind, kind, ["--listen", self.target, "--cluster-token-file",
                                              token_file(log_dir), *flags],
                                 "127.0.0.1", self.port, pathlib.Path(self.log_path), env or {})
        self.proc = self._service.launch()

    def wait(self, timeout: float = 120) -> "ServiceProcess":
        self._service.wait_ready(timeout)
        return self

    def log(self) -> str:
        with open(self.log_path, errors="replace") as fh:
            return fh.read()

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (a clean leave: deregisters, drains), SIGKILL if it hangs."""
        self._service.terminate()
        self._service.reap(timeout)
