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



STORM = """
import os, signal, sys, threading, time
from services.runtime.process import catch_stop_signals, wait_for_signal

catch_stop_signals()
print("waiting", flush=True)
wait_for_signal()
print("stopped", flush=True)
"""


def test_a_burst_of_stop_signals_while_waiting_never_deadlocks():
    # The handler used to set a threading.Event: it took the Event's lock, which the main thread
    # held inside Event.wait (or the first handler held when a second signal landed in it), and
    # the process hung for good; a store told to stop by its dead launcher hung 1 run in 6.
    import os
    import signal
    import time

    for _ in range(10):
        child = subprocess.Popen([sys.executable, "-c", STORM], stdout=subprocess.PIPE,
                                 text=True, cwd=pathlib.Path(__file__).parent.parent)
        try:
            assert child.stdout.readline().strip() == "waiting"
            time.sleep(0.05)
            for _ in range(300):  # PDEATHSIG, the launcher's SIGTERM, a user's Ctrl-C, ...
                os.kill(child.pid, signal.SIGTERM)
            out, _ = child.communicate(timeout=20)
            assert out.strip() == "stopped" and child.returncode == 0
        finally:
            if child.poll() is None:
                child.kill()
