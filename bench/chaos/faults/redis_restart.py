"""The store's index lives in Redis (--index redis://); Redis is killed (-9) and restarted on the
same port mid-replay (it keeps no data of its own): the store must keep serving, never wrong KV."""
import shutil
import socket
import subprocess
import time

from bench.chaos.faults import BaseFault, NotRun
from services.launch.launcher import free_port


class Fault(BaseFault):
    probe_misses_allowed = True  # Redis without persistence forgets the index (a miss at worst)
    proc = None

    def setup(self, ctx) -> None:
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            raise NotRun("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.workdir = ctx.workdir
        self._start()
        ctx.topo_kwargs["store_flags"] = ["--index", f"redis://127.0.0.1:{self.port}/0"]

    def _start(self) -> None:
        self.proc = subprocess.Popen([self.exe, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--dir", str(self.workdir), "--save", "", "--appendonly",
                                      "no"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def inject(self, ctx) -> int:
        self.proc.kill()
        self.proc.wait()
        time.sleep(1.0)
        self._start()
        return 1

    def teardown(self, ctx) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
