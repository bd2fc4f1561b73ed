"""SSD reads in flight share one bandwidth equally (processor sharing)."""
from __future__ import annotations

from typing import Hashable


class SharedBandwidth:
    __slots__ = ("bytes_per_s", "_left", "_last")

    def __init__(self, bytes_per_s: float) -> None:
        self.bytes_per_s = bytes_per_s
        self._left: dict[Hashable, float] = {}  # transfer id -> bytes still to move
        self._last = 0.0

    def _advance(self, now: float) -> None:
        if self._left and now > self._last:
            moved = (now - self._last) * self.bytes_per_s / len(self._left)
            for k in self._left:
                self._left[k] -= moved
        self._last = max(self._last, now)

    def start(self, tid: Hashable, nbytes: float, now: float) -> None:
        self._advance(now)
        self._left[tid] = float(nbytes)

    def next_completion(self) -> float | None:
        """When the first transfer in flight finishes, if nothing starts meanwhile."""
        if not self._left:
            return None
        return self._last + max(min(self._left.values()), 0.0) * len(self._left) / self.bytes_per_s

    def _left_at(self, now: float) -> dict[Hashable, float]:
        """Bytes each transfer still has to move at `now`, without advancing the state."""
        if not self._left:
            return {}
        moved = max(now - self._last, 0.0) * self.bytes_per_s / len(self._left)
        return {k: max(left - moved, 0.0) for k, left in self._left.items()}

    def finish_estimates(self, now: float) -> dict[Hashable, float]:
        """Seconds from `now` until each transfer in flight finishes, if nothing else starts."""
        out, t, prev, left = {}, 0.0, 0.0, self._left_at(now)
        for j, (k, nbytes) in enumerate(sorted(left.items(), key=lambda kv: kv[1])):
            t += (nbytes - prev) * (len(left) - j) / self.bytes_per_s  # the rest share equally
            prev = nbytes
            out[k] = t
        return out

    def load_estimate(self, nbytes: float, now: float) -> float:
        """Seconds from `now` until a transfer of `nbytes` started now would finish, if nothing
        else starts: under equal sharing it waits min(left, nbytes) of each one in flight."""
        left = self._left_at(now).values()
        return (sum(min(x, nbytes) for x in left) + nbytes) / self.bytes_per_s

    def finish_due(self, now: float) -> list[Hashable]:
        """Transfers done by `now` (within a microsecond of transfer), removed."""
        self._advance(now)
        eps = 1e-6 * self.bytes_per_s
        done = [k for k, left in self._left.items() if left <= eps]
        for k in done:
            del self._left[k]
        return done

    def __len__(self) -> int:
        return len(self._left)
