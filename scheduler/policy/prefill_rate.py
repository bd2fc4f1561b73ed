"""The compute side's prefill cost as the scheduler learns it from finished turns, for the
load-or-recompute choice (restore_choice.PrefillCost). Pure: no I/O, no clocks.

Each finished turn says how long its prefill took (TTFT less its queueing and KV load) for how
many tokens it computed (prompt less those restored). The cost is fitted as a + b · tokens by
least squares with exponentially decaying weights (`decay` per turn: recent turns count most, so
a worker that slows down under load is followed). Until `min_turns` are seen, or while they all
computed the same number of tokens, only b is known: a = 0, b = Σ seconds / Σ tokens.
"""
from __future__ import annotations

from scheduler.policy.restore_choice import PrefillCost


class PrefillRate:
    def __init__(self, decay: float = 0.98, min_turns: int = 8) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"PrefillRate decay must be in (0, 1], got {decay!r}")
        self.decay, self.min_turns = decay, min_turns
        self.turns = 0
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def observe(self, tokens: int, seconds: float) -> None:
        """A turn computed `tokens` prompt tokens in `seconds` of prefill (ignored unless both
        are positive: a turn that computed nothing says nothing about the rate)."""
        if tokens <= 0 or not seconds > 0:
            return
        d = self.decay
        self._w = self._w * d + 1.0
        self._x = self._x * d + tokens
        self._y = self._y * d + seconds
        self._xx = self._xx * d + tokens * tokens
        self._xy = self._xy * d + tokens * seconds
        self.turns += 1

    def cost(self) -> PrefillCost | None:
        """The fitted step, or None before `min_turns` turns."""
        if self.turns < self.min_turns:
            return None
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var > 1e-9 * mx * mx:
            b = (self._xy / self._w - mx * my) / var
            a = my - b * mx
            if b > 0 and a >= 0:
                return PrefillCost(overhead_s=a, s_per_token=b)
        return PrefillCost(overhead_s=0.0, s_per_token=my / mx)
