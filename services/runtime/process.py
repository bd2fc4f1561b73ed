"""Process-level helpers for a service: logging and running until SIGINT/SIGTERM."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

# Set by the launcher (services/launch/service_process.py) in each service it starts.
LAUNCHER_ENV = "BIDAW_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1


def setup_logging(service: str) -> None:
    """Structured (JSON) logs carrying the trace id; see services/runtime/logs.py."""
    from services.runtime.logs import setup_logging as setup

    setup(service)


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        pass


def stop_with_launcher() -> None:
    """A service a launcher started (`$BIDAW_LAUNCHER_PID`) is sent SIGTERM when the launcher
    dies, even by SIGKILL, and stops as on Ctrl-C: it would otherwise keep its port, unsupervised,
    and a new `bidaw up` on the same ports would meet it there. Linux only (PR_SET_PDEATHSIG)."""
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if not launcher.isdigit() or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(launcher):  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)
