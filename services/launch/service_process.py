"""One service of a local deployment as a child process: `bidaw serve KIND FLAGS` in a session of
its own (so it and whatever it starts, e.g. Ray, can be signalled as a group), its output in a
private log file, restartable with the same command (so on the same port and data directory)."""
from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

from services.runtime.grpc_util import wait_healthy
from services.runtime.pid_lock import Held, lock_with_pid
from services.runtime.process import LAUNCHER_ENV


_GIVEN: set[int] = set()  # ports this process handed out: not yet bound, so not "in use"


def free_port(host: str = "127.0.0.1") -> int:
    """A free port below the kernel's ephemeral range (32768+) and above Ray's worker ports
    (10002-19999), so nothing that binds port 0 meanwhile (Ray's own servers) can take it.
    Never one handed out before: a deployment picks ten before its services bind them, and
    two equal draws (a ~0.4% chance each time) failed a start with "Address already in use"."""
    import random

    if len(_GIVEN) > 4000:  # long since bound (or given up): the range must not run dry
        _GIVEN.clear()
    for _ in range(200):
        port = random.randrange(20000, 32000)
        if port not in _GIVEN and not port_in_use(host, port):
            _GIVEN.add(port)
            return port
    raise OSError("no free port in 20000-32000")


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on `port` (gRPC servers bind with SO_REUSEPORT, so a second
    one on the same port would start and share it: the launcher checks first)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed one's TIME_WAITs
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def lock_data_dir(run_dir: pathlib.Path) -> int:
    """An exclusive lock on a deployment's data directory (`run_dir/lock`, held by the open fd
    returned, which the kernel drops however this process ends; children do not inherit it).
    RuntimeError naming the holder if another deployment has it: a second one on the same
    directory overwrote the cluster token, so the first one's next restarted service was
    refused by its peers (UNAUTHENTICATED on every turn), and both wrote the same SSD tier,
    conversation journal and logs."""
    try:
        return lock_with_pid(private_dir(run_dir) / "lock")
    except Held as held:
        raise RuntimeError(f"--data-dir {run_dir.parent} is in use by another deployment "
                           f"(pid {held.holder}); stop it, or give this one its own --data-dir"
                           ) from None


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


def wait_http(url: str, timeout: float, alive=lambda: True) -> None:
    """Block until GET `url` answers 200; TimeoutError after `timeout` or once `alive()` fails."""
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


@dataclass
class ServiceProcess:
    name: str  # "store", "worker0", ...: its log is logs/NAME.log
    kind: str  # what `bidaw serve` runs: store, worker, scheduler or gateway
    args: list[str]  # the flags; a fault may change them before a restart
    host: str
    port: int
    log: pathlib.Path
    env: dict[str, str] = field(default_factory=dict)
    quiet: bool = True  # output to `log` (False: the terminal)
    proc: subprocess.Popen | None = None

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> subprocess.Popen:
        """Start (or start again) `bidaw serve KIND` with the current flags."""
        out = private_file(self.log) if self.quiet else None
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "serve", self.kind, *self.args],
                stdout=out, stderr=subprocess.STDOUT if out else None,
                env={**os.environ, "RAY_AUTH_MODE": "disabled", **self.env,
                     LAUNCHER_ENV: str(os.getpid())},  # it stops if this process dies
                start_new_session=True)
        finally:
            if out is not None:
                out.close()  # the child has its own copy
        return self.proc

    def wait_ready(self, timeout: float, tls=None) -> None:
        """Until it serves (gRPC health, or the gateway's GET /health); RuntimeError with its
        log's tail when it does not in `timeout` or dies first."""
        try:
            if self.kind == "gateway":
                wait_http(f"http://{self.target}/health", timeout, alive=self.alive)
            else:
                wait_healthy(self.target, timeout, alive=self.alive, tls=tls)
        except TimeoutError:
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{self.name} did not become healthy at {self.target}\n"
                               f"{tail}") from None

    def kill9(self, group: bool = True) -> None:
        """SIGKILL: the process (and, with `group`, everything it started, e.g. its Ray)."""
        if not self.alive():
            return
        try:
            if group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def terminate(self) -> None:
        """SIGTERM (a clean leave), after SIGCONT in case a fault left it stopped."""
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def reap(self, timeout: float) -> None:
        """Wait up to `timeout` for it to exit, then SIGKILL whatever is left of its group."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever it left behind (Ray) goes too
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.proc = None
