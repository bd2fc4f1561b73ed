"""Process-level helpers for a service: logging and running until SIGINT/SIGTERM."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

# Set by the launcher (services/launch/service_process.py) in each service it starts.
LAUNCHER_ENV = "BIDAW_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1


def setup_logging(service: str) -> None:
    """Structured (JSON) logs carrying the trace id; see services/runtime/logs.py."""
    from services.runtime.logs import setup_logging as setup

    setup(service)


# Set by a SIGINT/SIGTERM once `catch_stop_signals` has run; read by `wait_for_signal`. A plain
# flag: a handler runs between two bytecodes of the main thread, so one that takes a lock (an
# Event's set) deadlocks when the main thread holds it (inside that Event's wait), or when a
# second signal lands inside the first handler: a store told to stop hung, 1 run in 6 in CI.
_stop_flag = False
POLL_S = 0.2  # how soon `wait_for_signal` sees the flag (sleep is cut short by a signal anyway)


def catch_stop_signals() -> None:
    """From here on SIGINT/SIGTERM only ask the service to stop: it does so once it is serving
    (`wait_for_signal` returns at once if asked before). The default, an exception raised
    wherever the signal lands (inside a log call holding its lock, a server half started), could
    leave the process unable to exit: a store killed just after it started outlived its launcher.
    Later signals change nothing: a stopping service often gets two (PR_SET_PDEATHSIG when the
    thread that restarted it ends, then its launcher's SIGTERM), and the second must not cut its
    clean stop short (Ray's temporary directory was left behind). A start that hangs is ended by
    SIGKILL, as launchers do after their timeout. Handlers that a library installs in their
    place are put back with `signal_handlers_kept` (`ray.init`)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_stop_signal)


def _on_stop_signal(*_signal) -> None:
    global _stop_flag
    _stop_flag = True  # no lock, no call: safe wherever it lands, however often


def stop_requested() -> bool:
    return _stop_flag


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM (or return at once if one came since
    `catch_stop_signals`)."""
    catch_stop_signals()
    while not _stop_flag:
        time.sleep(POLL_S)


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


@contextlib.contextmanager
def signal_handlers_kept():
    """Puts back the SIGINT/SIGTERM handlers a library replaced (`ray.init` installs one that
    raises SystemExit wherever SIGTERM lands). Only the main thread has handlers to keep."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:
                signal.signal(sig, handler)
