"""Who reads the SSD first: demand ("urgent") reads before the one speculative ("background")
read of the Prefetcher, as in the timed simulator (bench/sim/ssd.py).

A background read goes in small chunks and, before each, waits while any urgent read is on the
disk, so an urgent read meets at most the chunks already issued. A demand read of the very
session being read in the background adopts that read instead of reading it again: from then on
it no longer yields (it is the demand's read now), and the demand finds the KV in DRAM."""
from __future__ import annotations

import threading
from contextlib import contextmanager


class ReadStopped(Exception):
    """The reader no longer wants the rest of the read (its turn took what had landed)."""
    bytes_read = 0  # what the read had read by then


def stop_check(stop: threading.Event | None):
    """What a demand read runs before each chunk: nothing, or a check of `stop`."""
    if stop is None:
        return None

    def check() -> None:
        if stop.is_set():
            raise ReadStopped()
    return check


class ReadGate:
    def __init__(self):
        self._cond = threading.Condition()
        self._urgent = 0                       # demand reads on the disk now
        self._background: str | None = None    # the session read in the background now
        self._adopted = False                  # a demand read asked for that session
        self._wanted: dict[str, int] = {}      # session -> demand reads of it under way
        self.yields = 0    # times a background read paused for urgent reads
        self.adoptions = 0  # background reads a demand read of the same session took over

    @contextmanager
    def urgent(self):
        """Around a demand read's disk I/O."""
        with self._cond:
            self._urgent += 1
        try:
            yield
        finally:
            with self._cond:
                self._urgent -= 1
                if not self._urgent:
                    self._cond.notify_all()

    @contextmanager
    def background(self, session_id: str):
        """Around the speculative read of `session_id` (one at a time: the Promoter's rule)."""
        with self._cond:
            self._background, self._adopted = session_id, False
            self._adopt()
        try:
            yield
        finally:
            with self._cond:
                self._background, self._adopted = None, False

    @contextmanager
    def wanted(self, session_id: str):
        """Around a whole demand read of `session_id` (its waits included): a background read
        of that session, in flight now or begun meanwhile, is the demand's read and stops
        yielding."""
        with self._cond:
            self._wanted[session_id] = self._wanted.get(session_id, 0) + 1
            self._adopt()
        try:
            yield
        finally:
            with self._cond:
                self._wanted[session_id] -= 1
                if not self._wanted[session_id]:
                    del self._wanted[session_id]

    def _adopt(self) -> None:
        if self._background in self._wanted and not self._adopted:
            self._adopted = True
            self.adoptions += 1
            self._cond.notify_all()

    def adopted(self, session_id: str) -> bool:
        """Whether the background read of `session_id` in flight was taken over by a demand."""
        with self._cond:
            return self._background == session_id and self._adopted

    def wait_turn(self) -> None:
        """Before a background read's next chunk: wait while an urgent read is on the disk."""
        with self._cond:
            if self._urgent and not self._adopted:
                self.yields += 1
            while self._urgent and not self._adopted:
                self._cond.wait()
