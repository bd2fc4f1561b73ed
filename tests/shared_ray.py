"""One Ray cluster for the whole test session, which the compute workers that tests start join
(`BIDAW_WORKER_RAY_ADDRESS`), as workers on Kubernetes join theirs.

A worker that starts its own Ray spends ~5 s on it and ~1 s more on its stop; the suite starts
some thirty. Tests about the worker's own Ray (its processes die with it, its temporary
directory is removed, its actor is one of its descendants) set the variable to "" for their
deployment, which gives it the default: a local Ray of its own."""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from services.launch.service_process import free_port

ADDRESS_ENV = "BIDAW_WORKER_RAY_ADDRESS"
OWN_RAY = {ADDRESS_ENV: ""}  # a LocalDeployment's extra_env: its workers start their own


class SharedRay:
    """`ray start --head --block` in its own process group on loopback; `stop` ends it all."""

    def __init__(self, num_cpus: int = 16, object_store_bytes: int = 256 << 20):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp_dir = tempfile.mkdtemp(prefix="ray-tests-", dir="/tmp")  # short socket paths
        self.log = open(pathlib.Path(self.temp_dir) / "head.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
             "--node-ip-address", "127.0.0.1", "--port", str(self.port),
             "--num-cpus", str(num_cpus), "--object-store-memory", str(object_store_bytes),
             "--include-dashboard", "false",
             "--disable-usage-stats", "--temp-dir", self.temp_dir],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"})

    def wait_ready(self, timeout: float = 120.0) -> "SharedRay":
        """Until `ray start` says the runtime started (GCS, raylet and agents up)."""
        path, deadline = pathlib.Path(self.log.name), time.monotonic() + timeout
        while b"Ray runtime started" not in path.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the tests' shared Ray did not start:\n"
                                   f"{path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 2), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
