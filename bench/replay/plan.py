"""Turn a trace into per-user scripts for the open-loop replay. Pure: no clocks, no I/O.

Choices, and why:
- Window: the busiest `window_s` of the trace unless one is given; a user's conversation starts
  at its first turn inside the window (turns before it are not replayed, so its first replayed
  turn has no stored history).
- Sampling: `users` users drawn with a seeded RNG among those with turns in the window; each keeps
  its first `max_rounds` turns there. Fewer users keeps the trace's per-user behaviour (think
  times, lengths, rounds) while cutting the load to what the machine can serve.
- Time: the first turn is sent at (trace time - window start) x time_scale; each next one
  think_s = (gap between the two turns in the trace) x time_scale after the previous answer has
  fully arrived, so a slow system delays a user's later turns as it would a real user's.
- Context: a turn whose conversation would pass `max_context` tokens (prompt + answer) starts a
  new session (a user opening a new chat) instead of being truncated, which would change the
  prefix and make stored KV unusable; a single turn longer than the context is clamped.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from bench.replay.tokens import DEFAULT_TOKEN_RANGE
from bench.traces.turn import Turn
from bench.traces.window import busiest_window


@dataclass(frozen=True)
class PlanConfig:
    window: tuple[float, float] | None = None  # trace seconds [start, end); None: the busiest
    window_s: float = 3600.0                   # length of the busiest window
    users: int = 0                             # users sampled from the window (0: all)
    max_rounds: int = 0                        # turns kept per user (0: all in the window)
    time_scale: float = 1.0                    # replay seconds per trace second
    max_context: int = 2048                    # most prompt + answer tokens of a conversation
    max_answer: int = 0                        # cap on answer tokens (0: only the context caps)
    token_range: tuple[int, int] = DEFAULT_TOKEN_RANGE
    seed: int = 0


@dataclass(frozen=True)
class ScriptedTurn:
    index: int            # position in the user's script
    trace_round: int      # round index the trace gives
    trace_time: float     # arrival in the trace (seconds)
    session: str          # session id on the wire
    history_tokens: int   # conversation tokens before this query (0: a new session)
    query_len: int
    answer_len: int
    think_s: float        # wait after the previous answer (scaled); 0 for the first turn
    clamped: bool = False  # lengths were cut to fit the context

    @property
    def prompt_tokens(self) -> int:
        return self.history_tokens + self.query_len


@dataclass(frozen=True)
class UserScript:
    user: int
    start_s: float        # when its first turn is sent, from the replay start (scaled)
    turns: tuple[ScriptedTurn, ...]


@dataclass(frozen=True)
class Plan:
    config: PlanConfig
    window: tuple[float, float]
    users: tuple[UserScript, ...]
    users_in_window: int = 0
    turns_in_window: int = 0

    @property
    def turns(self) -> int:
        return sum(len(u.turns) for u in self.users)

    @property
    def answer_tokens(self) -> int:
        return sum(t.answer_len for u in self.users for t in u.turns)

    def span_s(self) -> float:
        """Replay length if every answer were instant: the last turn's send time."""
        return max((u.start_s + sum(t.think_s for t in u.turns) for u in self.users), default=0.0)


def _fit(q: int, a: int, cfg: PlanConfig) -> tuple[int, int, bool]:
    """Lengths that fit one turn into the context (and under max_answer); whether they were cut."""
    q0, a0 = max(1, q), max(1, a)
    q = min(q0, cfg.max_context // 2)
    a = min(a0, cfg.max_answer or a0, cfg.max_context - q)
    return q, a, (q, a) != (q0, a0)


def script_user(user: int, turns: Sequence[Turn], window_start: float,
                cfg: PlanConfig) -> UserScript:
    """One user's turns (time-ordered) as a script."""
    out: list[ScriptedTurn] = []
    history, conv, prev_time = 0, 0, None
    for i, t in enumerate(turns):
        q, a, clamped = _fit(t.query_len, t.answer_len, cfg)
        if history + q + a > cfg.max_context:
            history, conv = 0, conv + 1
        think = 0.0 if prev_time is None else max(0.0, t.time - prev_time) * cfg.time_scale
        session = f"u{user}" if conv == 0 else f"u{user}.{conv}"
        out.append(ScriptedTurn(i, t.round, t.time, session, history, q, a, think, clamped))
        history += q + a
        prev_time = t.time
    start = (turns[0].time - window_start) * cfg.time_scale
    return UserScript(user, start, tuple(out))


def make_plan(trace: Sequence[Turn], cfg: PlanConfig) -> Plan:
    """Scripts for the sampled users of the window, ordered by their first turn."""
    if cfg.time_scale <= 0:
        raise ValueError("time_scale must be positive")
    window = cfg.window or busiest_window(trace, cfg.window_s)
    by_user: dict[int, list[Turn]] = defaultdict(list)
    for t in trace:
        if window[0] <= t.time < window[1]:
            by_user[t.user].append(t)
    users = sorted(by_user)
    if cfg.users and cfg.users < len(users):
        users = sorted(random.Random(cfg.seed).sample(users, cfg.users))
    scripts = []
    for u in users:
        turns = sorted(by_user[u], key=lambda t: (t.time, t.round))
        if cfg.max_rounds:
            turns = turns[:cfg.max_rounds]
        scripts.append(script_user(u, turns, window[0], cfg))
    scripts.sort(key=lambda s: (s.start_s, s.user))
    return Plan(cfg, window, tuple(scripts), users_in_window=len(by_user),
                turns_in_window=sum(len(v) for v in by_user.values()))
