"""Per user: does the length of the answer predict when this user comes back?

Bidaw's policies predict a session's next gap from the population's think time after answers of
that length, scaled by the user's own pace. That bet fails for users who do not read (scripts and
agents that send the next turn at once, whatever the answer). For each user this keeps, over its
observed gaps in log seconds (decayed means, so a user that changes is followed):

- the squared error of the answer-based prediction, made before the gap was seen (`log_predicted`
  from the policy: population median for that answer × the user's pace);
- the squared error of a constant-gap prediction: the user's own mean log gap so far;
- the user's own mean log gap and its spread.

`flat()`: after `min_obs` gaps the constant-gap predictor is better than the answer-based one and
the user's own gaps are tight (spread ≤ `max_spread` in log units): the answer says nothing about
this user, its own gaps say a lot. A machine-paced user (every next turn ~1 s after the answer)
is the clear case: spread 0. Such a user is then predicted from its own gaps (`center_s`,
`deadline_s`): back at about exp(mean), ended once idle beyond exp(mean + z·spread), far sooner
than a human's tail would allow; while it is active it is kept (its next turn is seconds away).
Users whose gaps are wide stay on the answer model, whatever its error: with a wide spread a
user's own history predicts the tail no better than the population does.

Pure, O(1) per observation, a few floats per user.
"""
from __future__ import annotations

import math

_MIN_GAP_S = 0.5  # the resolution of gaps (ThinkTimeModel's first bin)


class UserSignal:
    __slots__ = ("n", "mean", "var", "err_answer", "err_flat")

    def __init__(self) -> None:
        self.n = 0              # gaps observed
        self.mean = 0.0         # decayed mean of log(gap)
        self.var = 0.0          # decayed variance of log(gap)
        self.err_answer = 0.0   # decayed mean squared error of the answer-based prediction
        self.err_flat = 0.0     # ... of the constant-gap prediction (own mean before the gap)


class SignalModel:
    """The per-user rule, shared by every user (holds no per-user state itself)."""

    def __init__(self, min_obs: int = 5, max_spread: float = 0.02, fast_s: float = 3.0,
                 fast_spread: float = 0.5, decay: float = 0.8, tail_z: float = 3.0,
                 min_spread: float = 0.1) -> None:
        if (min_obs < 2 or not 0.0 < decay < 1.0 or min(max_spread, fast_spread) <= 0
                or fast_s < 0 or tail_z <= 0 or min_spread < 0):
            raise ValueError("SignalModel needs min_obs >= 2, 0 < decay < 1, max_spread > 0, "
                             "fast_spread > 0, fast_s >= 0, tail_z > 0, min_spread >= 0 (got "
                             f"{min_obs}, {decay}, {max_spread}, {fast_spread}, {fast_s}, "
                             f"{tail_z}, {min_spread})")
        self.min_obs = min_obs
        self.max_spread = max_spread
        self.fast_log = math.log(fast_s) if fast_s > 0 else -math.inf
        self.fast_spread = fast_spread
        self.decay = decay
        self.tail_z = tail_z
        self.min_spread = min_spread

    def observe(self, u: UserSignal, gap_s: float, log_predicted: float) -> None:
        """`u` came back `gap_s` seconds after an answer for which the answer-based model had
        predicted exp(`log_predicted`) seconds."""
        x = math.log(max(gap_s, _MIN_GAP_S))
        d = self.decay
        if u.n == 0:
            u.mean, u.var = x, 0.0
            u.err_answer = (x - log_predicted) ** 2
        else:
            u.err_answer = d * u.err_answer + (1.0 - d) * (x - log_predicted) ** 2
            flat = (x - u.mean) ** 2
            u.err_flat = flat if u.n == 1 else d * u.err_flat + (1.0 - d) * flat
            delta = x - u.mean
            u.mean += (1.0 - d) * delta
            u.var = d * (u.var + (1.0 - d) * delta * delta)
        u.n += 1

    def spread(self, u: UserSignal) -> float:
        return math.sqrt(u.var)

    def flat(self, u: UserSignal | None) -> bool:
        """The answer length does not predict this user's return; its own gaps do."""
        if u is None or u.n < self.min_obs or u.err_flat >= u.err_answer:
            return False
        spread = self.spread(u)
        return spread <= self.max_spread or (u.mean <= self.fast_log and spread <= self.fast_spread)

    def center_s(self, u: UserSignal) -> float:
        """The next gap of a flat user: its own typical gap (seconds)."""
        return math.exp(u.mean)

    def deadline_s(self, u: UserSignal) -> float:
        """Idle seconds after which a flat user counts as ended: `tail_z` spreads above its mean
        (the spread floored at `min_spread`, so a perfectly regular script gets some slack)."""
        return math.exp(u.mean + self.tail_z * max(self.spread(u), self.min_spread))
