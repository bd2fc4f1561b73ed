"""SSD transfers in flight share one bandwidth equally (processor sharing), with one priority
rule: a `background` transfer (a speculative promotion) is paused while an `urgent` one (a
demand load) is in flight, as a store that reads in chunks would serve the demand chunks first.
Transfers of neither kind (write-backs) always share. Without background transfers (every system
but bidaw-prefetch) the rule never acts and this is plain equal sharing."""
from __future__ import annotations

from typing import Hashable


class SharedBandwidth:
    __slots__ = ("bytes_per_s", "_left", "_last", "_urgent", "_background")

    def __init__(self, bytes_per_s: float) -> None:
        self.bytes_per_s = bytes_per_s
        self._left: dict[Hashable, float] = {}  # transfer id -> bytes still to move
        self._last = 0.0
        self._urgent: set[Hashable] = set()
        self._background: set[Hashable] = set()

    def _active(self, left: dict[Hashable, float], urgent: bool) -> list[Hashable]:
        """The transfers moving now: all, less the background ones while an urgent one runs."""
        if urgent and self._background:
            return [k for k in left if k not in self._background]
        return list(left)

    def _advance(self, now: float) -> None:
        if self._left and now > self._last:
            active = self._active(self._left, bool(self._urgent))
            moved = (now - self._last) * self.bytes_per_s / len(active)
            for k in active:
                self._left[k] -= moved
        self._last = max(self._last, now)

    def start(self, tid: Hashable, nbytes: float, now: float, urgent: bool = False,
              background: bool = False) -> None:
        self._advance(now)
        self._left[tid] = float(nbytes)
        if urgent:
            self._urgent.add(tid)
        elif background:
            self._background.add(tid)

    def expedite(self, tid: Hashable, now: float) -> None:
        """A background transfer becomes urgent (a turn now waits for it)."""
        if tid in self._background:
            self._advance(now)
            self._background.discard(tid)
            self._urgent.add(tid)

    def next_completion(self) -> float | None:
        """When the first transfer in flight finishes, if nothing starts meanwhile."""
        if not self._left:
            return None
        active = self._active(self._left, bool(self._urgent))
        least = min(self._left[k] for k in active)
        return self._last + max(least, 0.0) * len(active) / self.bytes_per_s

    def _left_at(self, now: float) -> dict[Hashable, float]:
        """Bytes each transfer still has to move at `now`, without advancing the state."""
        if not self._left:
            return {}
        active = self._active(self._left, bool(self._urgent))
        moved = max(now - self._last, 0.0) * self.bytes_per_s / len(active)
        return {k: max(left - moved, 0.0) if k in active else left
                for k, left in self._left.items()}

    def finish_estimates(self, now: float) -> dict[Hashable, float]:
        """Seconds from `now` until each transfer in flight finishes, if nothing else starts."""
        out: dict[Hashable, float] = {}
        left, urgent, t = self._left_at(now), set(self._urgent), 0.0
        while left:
            active = self._active(left, bool(urgent & left.keys()))
            least = min(left[k] for k in active)
            t += least * len(active) / self.bytes_per_s  # the active ones share equally
            for k in active:
                left[k] -= least
                if left[k] <= 0.0:
                    out[k] = t
                    del left[k]
        return out

    def load_estimate(self, nbytes: float, now: float) -> float:
        """Seconds from `now` until an urgent transfer (a demand load) of `nbytes` started now
        would finish, if nothing else starts: under equal sharing it waits min(left, nbytes) of
        each one in flight, the background ones paused meanwhile."""
        left = self._left_at(now)
        return (sum(min(x, nbytes) for k, x in left.items() if k not in self._background)
                + nbytes) / self.bytes_per_s

    def left(self, tid: Hashable, now: float) -> float:
        """Bytes transfer `tid` still has to move at `now` (0 if none)."""
        return self._left_at(now).get(tid, 0.0)

    def shorten(self, tid: Hashable, nbytes: float, now: float) -> None:
        """Transfer `tid` moves at most `nbytes` more; 0 drops it."""
        self._advance(now)
        if nbytes <= 0:
            self._drop(tid)
        elif tid in self._left:
            self._left[tid] = min(self._left[tid], float(nbytes))

    def finish_due(self, now: float) -> list[Hashable]:
        """Transfers done by `now` (within a microsecond of transfer), removed."""
        self._advance(now)
        eps = 1e-6 * self.bytes_per_s
        done = [k for k, left in self._left.items() if left <= eps]
        for k in done:
            self._drop(k)
        return done

    def _drop(self, tid: Hashable) -> None:
        self._left.pop(tid, None)
        self._urgent.discard(tid)
        self._background.discard(tid)

    def __len__(self) -> int:
        return len(self._left)
