"""A trace turned into per-user chains of turns for the timed simulator.

Each user's turns are replayed in order: the first at its trace time (÷ time_scale); each later
one either after the previous answer plus the trace's gap between the two turns ("closed", the
default: a user reads the answer before replying) or at its own trace time but never before the
previous answer ("open"). Turns in the measured window are counted; turns before it warm the
caches, turns up to `tail_s` after it keep the load realistic until the window drains.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.sim.cache import sampled_users
from bench.traces.turn import Turn

CLOSED, OPEN = "closed", "open"


@dataclass
class Workload:
    user: list[int]
    trace_time: list[float]    # trace seconds
    query: list[int]
    answer: list[int]
    history: list[int]         # tokens of the user's previous rounds (query + answer), uncapped
    next_turn: list[int]       # index of the user's next turn, -1 if none
    last: list[bool]           # the user's last turn in the trace (for the end oracle)
    measured: list[bool]
    first_turns: list[int]     # each user's first turn
    window: tuple[float, float]
    time_scale: float
    arrival_mode: str

    def __len__(self) -> int:
        return len(self.user)

    @property
    def measured_count(self) -> int:
        return sum(self.measured)

    def new_users_per_min(self) -> float:
        """Users whose first turn is in the window, per minute of simulated time."""
        if not self.trace_time:
            return 0.0
        start = max(self.window[0], min(self.trace_time))  # an open window: the trace's span
        end = min(self.window[1], max(self.trace_time) + 1.0)
        n = sum(1 for i in self.first_turns if start <= self.trace_time[i] < end)
        return n / ((end - start) / self.time_scale / 60.0) if end > start else 0.0

    def first_arrival(self, i: int) -> float:
        return self.trace_time[i] / self.time_scale

    def next_arrival(self, i: int, j: int, finished_at: float) -> float:
        """When turn j (after turn i of the same user, answered at `finished_at`) arrives."""
        if self.arrival_mode == OPEN:
            return max(self.trace_time[j] / self.time_scale, finished_at)
        return finished_at + (self.trace_time[j] - self.trace_time[i]) / self.time_scale


def build_workload(turns: list[Turn], window: tuple[float, float] | None = None,
                   sample_users: float | None = None, time_scale: float = 1.0,
                   arrival_mode: str = CLOSED, tail_s: float = 600.0) -> Workload:
    if time_scale <= 0:
        raise ValueError("time_scale must be > 0")
    if arrival_mode not in (CLOSED, OPEN):
        raise ValueError(f"arrival_mode must be {CLOSED!r} or {OPEN!r}")
    if window is None:
        window = (float("-inf"), float("inf"))
    start, end = window
    keep = sampled_users(turns, sample_users)
    w = Workload([], [], [], [], [], [], [], [], [], (start, end), time_scale, arrival_mode)
    history: dict[int, int] = {}
    last_index: dict[int, int] = {}
    for t in turns:  # sorted by time, so each user's turns come in order
        if t.user not in keep or t.time >= end + tail_s:
            continue
        i = len(w.user)
        prev = last_index.get(t.user)
        if prev is None:
            w.first_turns.append(i)
        else:
            w.next_turn[prev] = i
        last_index[t.user] = i
        h = history.get(t.user, 0)
        history[t.user] = h + t.query_len + t.answer_len
        w.user.append(t.user)
        w.trace_time.append(float(t.time))
        w.query.append(t.query_len)
        w.answer.append(max(t.answer_len, 1))
        w.history.append(h)
        w.next_turn.append(-1)
        w.last.append(False)
        w.measured.append(start <= t.time < end)
    for i in last_index.values():
        w.last[i] = True
    # Turns past end + tail are not loaded: freeing after the last loaded one touches no
    # measured turn, since those all come earlier in the user's chain.
    return w
