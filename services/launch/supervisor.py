"""Keeps a deployment's processes alive: one that exits while the deployment runs is reaped (no
zombie), whatever it left in its process group (Ray) is killed, and it is started again with
the same flags (so the same ports and data directory) after a bounded exponential backoff.

`Backoff` is the pure policy; `Supervisor` is the thread doing the process I/O. A service that
ran for `healthy_s` before it died starts over at the first delay; one that dies `max_failures`
times in a row sooner than that is given up on, with one log line saying so.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger("bidaw.supervisor")


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 0.5  # before the first restart
    max_delay_s: float = 30.0  # the delay doubles per fast failure up to this
    healthy_s: float = 60.0  # a run at least this long resets the count of fast failures
    max_failures: int = 5  # fast failures in a row before giving up


@dataclass
class Backoff:
    """How long to wait before restarting a service, from how long its runs lasted."""
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    failures: int = 0  # fast failures in a row

    def on_exit(self, ran_s: float) -> float | None:
        """The delay before the next start; None: give up."""
        if ran_s >= self.policy.healthy_s:
            self.failures = 0
        self.failures += 1
        if self.failures > self.policy.max_failures:
            return None
        return min(self.policy.first_delay_s * 2 ** (self.failures - 1), self.policy.max_delay_s)


def describe_exit(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"


@dataclass
class _Watched:
    proc: subprocess.Popen
    started: float
    backoff: Backoff
    due: float | None = None  # when to start it again (it is dead meanwhile)


class Supervisor:
    """Watches processes; `launch(name)` must start the named service again and return it."""

    def __init__(self, launch: Callable[[str], subprocess.Popen],
                 policy: RestartPolicy = RestartPolicy(), say: Callable[[str], None] | None = None,
                 poll_s: float = 0.2):
        self._launch = launch
        self._policy = policy
        self._say = say or log.warning
        self._poll_s = poll_s
        self._watched: dict[str, _Watched] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self.restarts: dict[str, int] = {}
        self.given_up: set[str] = set()

    def watch(self, name: str, proc: subprocess.Popen) -> None:
        """Watch `proc`, started any time before (a deployment watches its services only once
        all are ready): its run is measured from its own start."""
        with self._lock:
            self._watched[name] = _Watched(proc, started_at(proc.pid), Backoff(self._policy))
            self.restarts.setdefault(name, 0)

    def start(self) -> "Supervisor":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop restarting (before the processes are stopped on purpose)."""
        self._stop.set()
        with self._lock:  # waits for a restart in progress to finish
            pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            with self._lock:
                if self._stop.is_set():
                    return
                for name, w in list(self._watched.items()):
                    self._check(name, w)

    def _check(self, name: str, w: _Watched) -> None:
        now = time.monotonic()
        if w.due is None:
            code = w.proc.poll()  # reaps it
            if code is not None:
                _kill_group(w.proc.pid)  # what it started (its Ray) must not outlive it
                self._schedule(name, w, now - w.started, describe_exit(code))
            return
        if now < w.due:
            return
        try:
            w.proc = self._launch(name)
        except OSError as exc:  # could not even start: a fast failure
            self._schedule(name, w, 0.0, f"could not be started ({exc})")
            return
        w.started, w.due = started_at(w.proc.pid), None
        self.restarts[name] += 1
        self._say(f"{name} restarted (pid {w.proc.pid}, restart {self.restarts[name]})")

    def _schedule(self, name: str, w: _Watched, ran: float, why: str) -> None:
        delay = w.backoff.on_exit(ran)
        if delay is None:
            del self._watched[name]
            self.given_up.add(name)
            self._say(f"{name} {why} after {ran:.1f} s: {w.backoff.failures - 1} fast failures "
                      "in a row; giving up on it (see its log)")
            return
        w.due = time.monotonic() + delay
        self._say(f"{name} {why} after {ran:.1f} s; restarting in {delay:.1f} s")


def started_at(pid: int) -> float:
    """When process `pid` started, on the `time.monotonic()` clock: from its start time in
    /proc (clock ticks since boot); now where /proc cannot say (not Linux, already gone)."""
    now = time.monotonic()
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()  # after "pid (comm)": state is first
        ticks = int(fields[19])  # field 22 of stat(5), starttime
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        age = since_boot - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - max(age, 0.0)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
