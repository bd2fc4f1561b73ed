"""Process-level helpers for a service: logging and running until SIGINT/SIGTERM."""
from __future__ import annotations

import signal
import threading


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
