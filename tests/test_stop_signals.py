"""A service asked to stop (SIGTERM, Ctrl-C) while it starts stops once it serves, instead of
taking an exception wherever the signal landed: a store killed just after it answered health
used to outlive its launcher now and then. Run in a child process, so pytest keeps its own
handlers."""
from __future__ import annotations

import pathlib
import subprocess
import sys

CHILD = """
import os, signal, sys, time
from services.runtime.process import catch_stop_signals, stop_requested, wait_for_signal

catch_stop_signals()
os.kill(os.getpid(), signal.SIGTERM)   # while "starting"
time.sleep(0.2)                         # the handler has run: no exception was raised here
print("asked", stop_requested(), flush=True)
wait_for_signal()                       # returns at once: the request was kept
os.kill(os.getpid(), signal.SIGTERM)  # a second (PDEATHSIG, then the launcher's)
time.sleep(0.2)                         # does not cut the clean stop short
print("stopping", flush=True)
"""

KEPT = """
import signal, sys
from services.runtime.process import catch_stop_signals, signal_handlers_kept

catch_stop_signals()
ours = signal.getsignal(signal.SIGTERM)
with signal_handlers_kept():            # as around ray.init, which installs sys.exit on SIGTERM
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))
print(signal.getsignal(signal.SIGTERM) is ours, flush=True)
"""


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=pathlib.Path(__file__).parent.parent)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:-1]


def test_a_signal_while_starting_is_kept_until_the_service_waits_for_it():
    assert _run(CHILD) == ["asked True", "stopping"]


def test_a_library_that_replaces_the_handlers_does_not_keep_them():
    assert _run(KEPT) == ["True"]

