"""Whether a batch step may run while a turn restores its KV.

Off (the default) restores run in the callers' threads, overlapping with the batch. On, it is
the baseline of a synchronous offload connector (vLLM + LMCache's default): a restore runs
between steps and every running sequence waits for it; restores go first (the step waits for
every one that is waiting).
"""
from __future__ import annotations

import contextlib
import threading


class StepGate:
    def __init__(self, exclusive: bool = False):
        self.exclusive = exclusive
        self._turns = threading.Condition()  # restores waiting or running / a step running
        self._restoring = 0
        self._stepping = False

    @contextlib.contextmanager
    def restoring(self):
        if not self.exclusive:
            yield
            return
        with self._turns:
            self._restoring += 1
            while self._stepping:
                self._turns.wait()
        try:
            yield
        finally:
            with self._turns:
                self._restoring -= 1
                self._turns.notify_all()

    @contextlib.contextmanager
    def stepping(self):
        if not self.exclusive:  # the hot path takes no lock
            yield
            return
        with self._turns:
            while self._restoring:
                self._turns.wait()
            self._stepping = True
        try:
            yield
        finally:
            with self._turns:
                self._stepping = False
                self._turns.notify_all()
