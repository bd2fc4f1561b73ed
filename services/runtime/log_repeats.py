"""Repeated log lines from libraries, bounded: a tracing collector that is down makes the
OpenTelemetry exporter log a WARNING and an ERROR for every batch of spans, every few seconds,
for as long as it is down. The first of each kind passes; then at most one every `every_s`,
saying how many like it were held back. Our own loggers are never filtered; a line of ours that
a lasting cause would write on every turn is bounded where it is written (Reminder)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable


class Reminder:
    """For a line of our own that the same cause would write on every turn (a disk that stays
    full, a store that refuses every write): `due()` says whether to write it now, the first
    time and then at most once every `every_s`, with how many were held back since. Thread-safe."""

    def __init__(self, every_s: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.every_s = every_s
        self.clock = clock
        self._last: float | None = None
        self._held = 0
        self._lock = threading.Lock()

    def due(self) -> int | None:
        """None: hold this one back; else write it, saying how many were held back before."""
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last < self.every_s:
                self._held += 1
                return None
            held, self._last, self._held = self._held, now, 0
            return held


def since(held: int) -> str:
    """The suffix of a reminded line: how many like it were held back."""
    return f" ({held} more like it since the last such line)" if held else ""


class RepeatFilter(logging.Filter):
    """A handler's filter (a logger's would not see its children's records): records of
    loggers under `prefix` are bounded, all others pass."""

    def __init__(self, prefix: str = "opentelemetry", every_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.prefix = prefix
        self.every_s = every_s
        self.clock = clock
        self._last: dict[tuple, float] = {}   # kind -> when one last passed
        self._held: dict[tuple, int] = {}     # kind -> held back since

    def filter(self, record: logging.LogRecord) -> bool:
        if not (record.name == self.prefix or record.name.startswith(self.prefix + ".")):
            return True
        kind = (record.name, record.levelno, str(record.msg)[:60])
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        held = self._held.pop(kind, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {now - last:.0f} s)"
        self._last[kind] = now
        if len(self._last) > 1000:  # kinds are few; a bound all the same
            self._last.clear()
        return True
