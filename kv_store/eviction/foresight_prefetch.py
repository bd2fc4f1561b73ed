"""Foresight-prefetch: bidaw-prefetch promoting from a return predictor of chosen sharpness.

A bound, as Belady is for demand caching: what predictive promotion would give if the next
turn's time were predicted with a log-normal error of standard deviation `sigma` (0: exactly).
It evicts and weighs victims as bidaw-prefetch does; only the return window changes. The driver
tells it each session's true next turn (`set_next_time`, the replay with SSD time does); at each
eviction it draws prediction = true gap × e^(sigma·z), z ~ N(0, 1), and returns the window
(prediction × e^(-lead_sd·sigma), prediction × e^(1.28·sigma)): promotion starts `lead_sd`
standard deviations before the prediction (with a 1 s horizon instead of bidaw-prefetch's
30 → 5 s, long enough for a read of the reference set-up: 0.2 s per GB) and gives up at its
q90. A session with no later turn is never promoted. For bounds only; it needs the future (docs/policies.md, "What the two unmet goals need").
"""
from __future__ import annotations

import math
import random

from kv_store.eviction.base import Key
from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy

_Q90 = 1.2816  # the standard normal's 90th percentile


class ForesightPrefetchPolicy(BidawPrefetchPolicy):
    name = "foresight-prefetch"

    def __init__(self, sigma: float = 0.0, lead_sd: float = 1.28, seed: int = 1,
                 horizon_s: float = 1.0, loaded_horizon_s: float | None = None, **kwargs) -> None:
        if not 0.0 <= sigma <= 5.0 or not 0.0 <= lead_sd <= 5.0:
            raise ValueError(f"foresight-prefetch needs sigma and lead_sd in [0, 5] "
                             f"(got {sigma}, {lead_sd})")
        super().__init__(horizon_s=horizon_s, loaded_horizon_s=loaded_horizon_s, **kwargs)
        self.sigma, self.lead_sd = sigma, lead_sd
        self._rng = random.Random(seed)            # the same errors on every run
        self._next: dict[Key, float] = {}

    def set_next_time(self, key: Key, t: float) -> None:
        """When `key`'s next turn arrives (inf: never)."""
        self._next[key] = t

    def return_window(self, key: Key) -> tuple[float, float] | None:
        s = self._sessions.get(key)
        nxt = self._next.get(key, math.inf)
        if s is None or s.last is None or math.isinf(nxt):
            return None
        predicted = max(nxt - s.last, 0.5) * math.exp(self.sigma * self._rng.gauss(0.0, 1.0))
        return (s.last + predicted * math.exp(-self.lead_sd * self.sigma),
                s.last + predicted * math.exp(_Q90 * self.sigma) + 1.0)

    def _note_removal(self, key: Key) -> None:
        if key != self._victim:  # freed: its end was announced
            self._next.pop(key, None)
        super()._note_removal(key)
