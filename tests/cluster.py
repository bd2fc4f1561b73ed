"""Services as separate processes for multi-node tests on loopback (more than `bidaw up` runs)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from services.grpc_util import wait_healthy
from services.launcher import free_port


class ServiceProcess:
    def __init__(self, kind: str, log_dir, *flags: str):
        self.kind = kind
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        log = open(os.path.join(log_dir, f"{kind}-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", kind, "--listen", self.target,
             *flags], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"})

    def wait(self, timeout: float = 120) -> "ServiceProcess":
        wait_healthy(self.target, timeout, alive=lambda: self.proc.poll() is None)
        return self

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (a clean leave: deregisters, drains), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
