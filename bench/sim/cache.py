"""Cache-only replay: accesses in trace order, no timing, the paper's analysis-script methodology.

- users = those whose round 0 is in the trace (see `sampled_users` for excerpts); `sample_users=F`
  keeps those whose rank in ascending id order satisfies rank % 10 < round(10 F);
- a user's KV size at an access = min(tokens of all previous rounds, max_kv_tokens) × bytes/token;
  with `kv_after_turn` the turn's own tokens count too (what the store holds once the turn is
  saved): beyond the scripts, needed where sessions end after one turn, which hold nothing else;
- hit if in DRAM; a miss (evicted earlier) brings it back; a first access is neither (counted
  apart, for the share of all turns served from DRAM);
- with the end oracle, a user's KV is freed right after its last access in the trace;
- after each access, while free DRAM < watermark, evict the policy's victim (the entry just
  accessed may go too); the policy breaks ties by order of entry into DRAM;
- hits/misses are counted for accesses with timestamp in [window start, window end); the cache
  stops at the window end.
The very policy classes the KV store service runs are driven here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from bench.traces.turn import Turn
from kv_store.eviction.base import EvictionPolicy
from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.registry import make_policy

GIB = 1 << 30


def parse_window(text: str | None) -> tuple[float, float] | None:
    """'START:END' seconds -> (start, end); either side may be empty (unbounded)."""
    if not text:
        return None
    lo, sep, hi = text.partition(":")
    if not sep:
        raise ValueError(f"window must be START:END, got {text!r}")
    return (float(lo) if lo else float("-inf"), float(hi) if hi else float("inf"))


@dataclass
class AccessLog:
    """The trace turned into parallel lists, prepared once and replayed under every policy."""

    times: list[float]
    users: list[int]
    sizes: list[int]        # KV bytes at the access (previous rounds only)
    answers: list[int]      # answer tokens of this turn (known once the turn is done)
    next_index: list[int]   # index of the same user's next access; len(times) if none
    last: list[bool]        # the user's last access in the trace

    def __len__(self) -> int:
        return len(self.times)


def sampled_users(turns: Iterable[Turn], sample_users: float | None,
                  partial_users: str = "auto") -> set[int]:
    """Users whose round 0 is in the trace, optionally the scripts' deterministic 1-in-10 sample.

    partial_users: "drop" keeps only users whose round 0 is in the trace (the scripts' rule);
    "keep" also keeps users first seen mid-conversation; "auto" keeps them only when no user
    starts in the trace (an excerpt such as bidaw_sample.txt would otherwise be empty).
    """
    turns = list(turns)
    users = sorted({t.user for t in turns if t.round == 0})
    if partial_users == "keep" or (partial_users == "auto" and not users):
        users = sorted({t.user for t in turns})
    if sample_users is None or sample_users >= 1.0:
        return set(users)
    keep = round(10 * sample_users)
    return {u for rank, u in enumerate(users) if rank % 10 < keep}


def prepare_accesses(turns: list[Turn], kv_bytes_per_token: int = 819200, max_kv_tokens: int = 2048,
                     sample_users: float | None = None, partial_users: str = "auto",
                     kv_after_turn: bool = False) -> AccessLog:
    """The replayable access log. A user first seen at round r > 0 (only with partial users) is
    given r × the trace's mean tokens per turn of earlier history."""
    keep = sampled_users(turns, sample_users, partial_users)
    per_turn = (sum(t.query_len + t.answer_len for t in turns) / len(turns)) if turns else 0.0
    history: dict[int, int] = {}
    times, users, sizes, answers = [], [], [], []
    for t in turns:
        if t.user not in keep:
            continue
        prev = history.get(t.user)
        if prev is None:
            prev = int(t.round * per_turn)
        after = prev + t.query_len + t.answer_len
        times.append(t.time)
        users.append(t.user)
        sizes.append(min(after if kv_after_turn else prev, max_kv_tokens) * kv_bytes_per_token)
        answers.append(t.answer_len)
        history[t.user] = after
    n = len(times)
    next_index = [n] * n
    last = [False] * n
    seen: dict[int, int] = {}
    for i in range(n - 1, -1, -1):
        u = users[i]
        j = seen.get(u)
        if j is None:
            last[i] = True
        else:
            next_index[i] = j
        seen[u] = i
    return AccessLog(times, users, sizes, answers, next_index, last)


@dataclass
class CacheResult:
    hits: int = 0
    misses: int = 0
    hit_bytes: int = 0
    miss_bytes: int = 0
    evictions: int = 0
    firsts: int = 0            # first accesses in the window (neither hit nor miss)
    accesses: int = 0          # accesses replayed (up to the window end)

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    @property
    def byte_hit_rate(self) -> float:
        n = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / n if n else 0.0

    @property
    def turn_hit_rate(self) -> float:
        """Share of all turns in the window served from DRAM (first turns count as not)."""
        n = self.hits + self.misses + self.firsts
        return self.hits / n if n else 0.0

    def as_dict(self) -> dict:
        return {"hit_rate": self.hit_rate, "byte_hit_rate": self.byte_hit_rate, "hits": self.hits,
                "misses": self.misses, "evictions": self.evictions, "firsts": self.firsts,
                "turn_hit_rate": self.turn_hit_rate}


def replay(log: AccessLog, policy: EvictionPolicy, dram_bytes: int, watermark_bytes: int = 2 * GIB,
           window: tuple[float, float] | None = None, end_oracle: bool = True, lookahead: int = 30,
           progress: Callable[[int], None] | None = None) -> CacheResult:
    """Replay `log` through `policy` with a DRAM tier of `dram_bytes`; counts inside `window`."""
    start, end = window if window is not None else (float("-inf"), float("inf"))
    res = CacheResult()
    dram = TierLedger(policy, dram_bytes, watermark_bytes)
    evicted: set[int] = set()          # users whose KV was evicted (a later access is a miss)
    set_next_use = getattr(policy, "set_next_use", None)
    times, users, sizes, answers, nexts, lasts = (log.times, log.users, log.sizes, log.answers,
                                                   log.next_index, log.last)
    n = len(times)
    resident, limit = dram.sizes, dram_bytes - watermark_bytes  # read-only views for speed
    admit, touch, remove, make_room = dram.admit, dram.touch, dram.remove, dram.make_room
    observe_answer, observe_queue = policy.observe_answer, policy.observe_queue
    on_evict = evicted.add
    i = 0
    for i in range(n):
        now = times[i]
        if now >= end:
            break
        if progress is not None and i & 0xFFFF == 0:
            progress(i)
        u = users[i]
        size = sizes[i]
        counted = now >= start
        if set_next_use is not None:
            set_next_use(u, nexts[i])
        if u in resident:
            if counted:
                res.hits += 1
                res.hit_bytes += size
            touch(u, now, size)
        else:
            if u in evicted:
                evicted.discard(u)
                if counted:
                    res.misses += 1
                    res.miss_bytes += size
            elif counted:
                res.firsts += 1
            admit(u, size, now)
        observe_answer(u, answers[i], now)
        if end_oracle and lasts[i]:
            remove(u)
        if dram.used > limit:  # less than the watermark free: the look-ahead, then evict
            observe_queue(users[i + 1:i + 1 + lookahead], now)
            make_room(0, now, on_evict=on_evict)
    res.evictions = dram.evictions
    res.accesses = i
    return res


@dataclass
class CacheSimConfig:
    dram_gib: float = 200.0
    kv_bytes_per_token: int = 819200
    max_kv_tokens: int = 2048
    watermark_gib: float = 2.0
    window: tuple[float, float] | None = None
    sample_users: float | None = None
    end_oracle: bool = True
    lookahead: int = 30
    partial_users: str = "auto"
    kv_after_turn: bool = False
    policy_kwargs: dict[str, dict] = field(default_factory=dict)


def simulate_policies(turns: list[Turn], policies: Iterable[str], cfg: CacheSimConfig,
                      log: AccessLog | None = None,
                      progress: Callable[[str, int, int], None] | None = None) -> dict[str, CacheResult]:
    """Replay the same trace under each named policy; one result per name, in order."""
    if log is None:
        log = prepare_accesses(turns, cfg.kv_bytes_per_token, cfg.max_kv_tokens, cfg.sample_users,
                               cfg.partial_users, cfg.kv_after_turn)
    out: dict[str, CacheResult] = {}
    for name in policies:
        kwargs = dict(cfg.policy_kwargs.get(name, {}))
        policy = make_policy(name, int(cfg.dram_gib * GIB), int(cfg.watermark_gib * GIB), **kwargs)
        cb = (lambda i, _n=name: progress(_n, i, len(log))) if progress else None
        out[name] = replay(log, policy, int(cfg.dram_gib * GIB), int(cfg.watermark_gib * GIB),
                           cfg.window, cfg.end_oracle, cfg.lookahead, cb)
    return out
