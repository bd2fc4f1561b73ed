"""Services as separate processes for multi-node tests on loopback (more than `bidaw up` runs).
Each gets the test process's cluster token (made on first use) by file, as `bidaw up` does, so
the test's own clients (services.runtime.grpc_util.channel) are authenticated with it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from services.runtime.cluster_auth import write_token_file
from services.runtime.grpc_util import ensure_token, wait_healthy
from services.launch.launcher import free_port


def token_file(directory) -> str:
    """A 0600 file in `directory` holding this process's cluster token."""
    path = os.path.join(directory, "cluster-token")
    write_token_file(path, ensure_token(), overwrite=True)
    return path


class ServiceProcess:
    def __init__(self, kind: str, log_dir, *flags: str, env: dict | None = None):
        self.kind = kind
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"{kind}-{self.port}.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "serve", kind, "--listen", self.target,
             "--cluster-token-file", token_file(log_dir), *flags], stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_AUTH_MODE": "disabled", **(env or {})})

    def wait(self, timeout: float = 120) -> "ServiceProcess":
        wait_healthy(self.target, timeout, alive=lambda: self.proc.poll() is None)
        return self

    def log(self) -> str:
        with open(self.log_path, errors="replace") as fh:
            return fh.read()

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (a clean leave: deregisters, drains), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
