"""Ghost cache: a metadata-only replay of the recent past under Belady (furthest next use first).

Bidaw needs, for each 'promising' reuse-distance bucket, how often an optimal policy still hits.
The ghost keeps the accesses of the last `lag_s` seconds in a buffer; an access leaves the buffer
(and is replayed) once it is `lag_s` old, by which time its session's next access is known if it
came within `lag_s` (later or never: treated as 'never', evicted first). Replay is incremental, a
few steps per new access, so every call stays O(log n). Hit counts per bucket decay with a
half-life of about `window` replayed accesses: the estimate follows the recent past.

With `sample_rate` R > 1 the ghost follows only the sessions whose stable hash falls in 1/R of
the key space, with capacity and watermark divided by R (spatial sampling, as in SHARDS): R times
less work for an estimate of the same hit rates.
"""
from __future__ import annotations

import zlib
from collections import deque
from typing import Hashable

from kv_store.eviction.lazy_heap import LazyHeap

Key = Hashable
NEVER = float("inf")


class GhostCache:
    def __init__(self, capacity_bytes: int, n_buckets: int, watermark_bytes: int = 0,
                 lag_s: float = 300.0, window: float = 4000.0, prior_hit_rate: float = 0.5,
                 prior_weight: float = 2.0, sample_rate: int = 1) -> None:
        self.sample_rate = max(int(sample_rate), 1)
        self.capacity = capacity_bytes // self.sample_rate
        self.watermark = watermark_bytes // self.sample_rate
        self.lag_s = lag_s
        self._gamma = 1.0 - 1.0 / window
        # buffer of [key, size, bucket, time, next_position]; positions are global counters
        self._buf: deque[list] = deque()
        self._base = 0                          # position of _buf[0]
        self._last_pos: dict[Key, int] = {}     # key -> its latest position still in the buffer
        # the replayed cache
        self._heap = LazyHeap()                 # priority (-next_use, entry order)
        self._size: dict[Key, int] = {}
        self._free = self.capacity
        self._entries = 0
        # Decayed hit and access counts per bucket, started from a weak prior.
        self._prior_hit_rate = prior_hit_rate
        self._hits = [prior_hit_rate * prior_weight] * n_buckets
        self._total = [prior_weight] * n_buckets
        self.replayed = 0

    def set_capacity(self, capacity_bytes: int, watermark_bytes: int | None = None) -> None:
        capacity_bytes //= self.sample_rate
        self._free += capacity_bytes - self.capacity
        self.capacity = capacity_bytes
        if watermark_bytes is not None:
            self.watermark = watermark_bytes // self.sample_rate

    def record(self, key: Key, size: int, bucket: int | None, now: float) -> None:
        """A real access of `key` (`size` bytes, reuse distance in `bucket`, None if unknown)."""
        if self.sample_rate > 1 and stable_hash(key) % self.sample_rate:
            return
        pos = self._base + len(self._buf)
        prev = self._last_pos.get(key)
        if prev is not None:
            self._buf[prev - self._base][4] = pos
        elif key in self._size:  # already replayed with 'never': now we know better
            self._heap.set(key, (-pos, self._heap.priority(key)[1]))
        self._last_pos[key] = pos
        self._buf.append([key, size, bucket, now, NEVER])
        # Replay what is old enough; at most a few per call so one call never does much work.
        if self._buf[0][3] <= now - self.lag_s:
            self.advance(now, max_steps=4)

    def advance(self, now: float, max_steps: int | None = None) -> int:
        """Replay buffered accesses at least `lag_s` old (all of them if max_steps is None)."""
        horizon = now - self.lag_s
        done = 0
        while self._buf and self._buf[0][3] <= horizon and (max_steps is None or done < max_steps):
            self._replay_one()
            done += 1
        return done

    def _replay_one(self) -> None:
        key, size, bucket, _, nxt = self._buf.popleft()
        pos = self._base
        self._base += 1
        if self._last_pos.get(key) == pos:
            del self._last_pos[key]
        self.replayed += 1
        old = self._size.get(key)
        if bucket is not None:  # a first access (no reuse distance) is neither hit nor miss
            g = self._gamma
            self._hits[bucket] = self._hits[bucket] * g + (1.0 if old is not None else 0.0)
            self._total[bucket] = self._total[bucket] * g + 1.0
        if old is not None:
            self._free -= size - old
            order = self._heap.priority(key)[1]
        else:
            self._free -= size
            self._entries += 1
            order = self._entries
        self._size[key] = size
        self._heap.set(key, (-nxt, order))
        while self._free < self.watermark:
            v = self._heap.pop()
            if v is None:
                break
            self._free += self._size.pop(v)

    def hit_rate(self, bucket: int) -> float:
        total = self._total[bucket]
        return self._hits[bucket] / total if total > 0 else self._prior_hit_rate

    def __len__(self) -> int:
        """Entries in the replayed cache."""
        return len(self._size)



def stable_hash(key: Key) -> int:
    """A hash that is the same in every process (Python salts str hashes per process)."""
    if isinstance(key, int):
        return (key * 2654435761) & 0xFFFFFFFF
    data = key.encode() if isinstance(key, str) else key if isinstance(key, bytes) else repr(key).encode()
    return zlib.crc32(data)
