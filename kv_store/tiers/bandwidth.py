"""SSD bandwidth: a cap that emulates a slower disk, and a meter that learns the real rate.

Both are pure (time is an argument); the SSD tier sleeps for the delays the cap hands out.
"""
from __future__ import annotations

import threading


class BandwidthCap:
    """A token bucket shared by every SSD read: `rate` bytes per second (0: no cap), banking at
    most `burst` bytes of idle time. With `burst` = one read, a read after idle time starts at
    once (a disk that is mostly idle looks faster than the cap); with 0 every read waits its
    bytes / rate behind those reserved before it, as on a disk that serves one rate."""

    def __init__(self, rate: float, burst: int = 8 << 20):
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)  # may go negative: bytes promised ahead of the rate
        self._at = None
        self._lock = threading.Lock()

    def reserve(self, nbytes: int, now: float) -> float:
        """Seconds to wait before reading `nbytes` (reservations queue up in call order)."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            if self._at is not None:
                self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= nbytes
            return max(-self._tokens / self.rate, 0.0)


class BandwidthMeter:
    """Aggregate read rate of the SSD tier, an exponentially weighted mean over finished reads.

    Concurrent reads share the disk, so a read's own rate understates the disk's: the meter
    scales each read's rate by the reads that overlapped it."""

    def __init__(self, initial: float, weight: float = 0.3):
        self.rate = initial  # the configured guess, until the first measurement replaces it
        self.weight = weight
        self._measured = False
        self._lock = threading.Lock()

    def observe(self, nbytes: int, seconds: float, concurrent: int = 1) -> None:
        if seconds <= 0 or nbytes < (1 << 20):  # tiny reads measure latency, not bandwidth
            return
        with self._lock:
            sample = nbytes * max(concurrent, 1) / seconds
            self.rate += (self.weight if self._measured else 1.0) * (sample - self.rate)
            self._measured = True
