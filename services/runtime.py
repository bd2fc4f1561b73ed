"""Process-level helpers for a service: logging and running until SIGINT/SIGTERM."""
from __future__ import annotations

import logging
import os
import signal
import threading


def setup_logging(service: str) -> None:
    level = os.environ.get("BIDAW_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format=f"%(asctime)s {service} %(levelname)s %(name)s: "
                        "%(message)s")


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        pass
