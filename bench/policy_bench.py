"""Micro-benchmarks of the pure policies: scheduling and eviction decision times, cache-only speed.

- schedule decision: with `queued` requests in the dual queue (half waiting on SSD, half ready),
  one decision = pick the next SSD load by disk-HRRN + promote a finished load + dispatch the next
  ready request + enqueue a new arrival (so the queue stays at `queued`);
- eviction decision: with `sessions` entries in the policy, after a warm-up that feeds it
  realistic turns (sizes, answers, think times), one decision = `victim` + `remove` of it + `admit`
  of a returning session;
- cache-only speed: turns per second of bench.sim.cache.replay over a trace, per policy.
Medians of per-decision wall times; the machine is noisy, so compare ratios run side by side.
"""
from __future__ import annotations

import random
import statistics
import time
from typing import Callable

from scheduler.policy import make_queue

GIB = 1 << 30
KIB = 1 << 10


def schedule_decision_ms(queued: int = 10_000, decisions: int = 2_000, seed: int = 0,
                         policy: str = "bidaw") -> dict[str, float]:
    rng = random.Random(seed)
    q = make_queue(policy, max_concurrent_loads=1)
    seq = 0
    now = 0.0

    def arrive() -> None:
        nonlocal seq
        seq += 1
        on_ssd = rng.random() < 0.5
        q.add(seq, seq % 100_000, seq, now, "ssd" if on_ssd else "dram",
              rng.randint(1, 2048) * 400 * KIB if on_ssd else 0)

    for _ in range(queued):
        now += 0.001
        arrive()
    loading = None
    samples, pick, pop = [], [], []
    for _ in range(decisions):
        now += 0.05
        t0 = time.perf_counter()
        if loading is not None:
            q.load_finished(loading)
        t1 = time.perf_counter()
        req = q.next_load(now, 0)
        loading = req.request_id if req is not None else None
        t2 = time.perf_counter()
        q.pop_ready()
        t3 = time.perf_counter()
        arrive()
        t4 = time.perf_counter()
        samples.append(t4 - t0)
        pick.append(t2 - t1)
        pop.append(t3 - t2)
    ms = 1e3
    return {"decision_ms_p50": statistics.median(samples) * ms,
            "next_load_ms_p50": statistics.median(pick) * ms,
            "pop_ready_ms_p50": statistics.median(pop) * ms,
            "queued": len(q)}


def evict_decision_ms(policy_name: str = "bidaw", sessions: int = 100_000, decisions: int = 2_000,
                      seed: int = 0) -> dict[str, float]:
    from kv_store.eviction.registry import make_policy

    rng = random.Random(seed)
    policy = make_policy(policy_name, 200 * GIB)
    now = 0.0
    sizes: dict[int, int] = {}
    # Warm-up: every session arrives, answers, and some come back a few times.
    for s in range(sessions):
        now += 0.01
        sizes[s] = rng.randint(1, 2048) * 800 * KIB
        policy.admit(s, sizes[s], now)
        policy.observe_answer(s, rng.randint(5, 300), now)
    for _ in range(sessions // 2):
        now += 0.01
        s = rng.randrange(sessions)
        if s in policy:
            policy.touch(s, sizes[s], now)
            policy.observe_answer(s, rng.randint(5, 300), now)
    pinned = set(rng.sample(range(sessions), 100))
    policy.observe_queue(list(pinned)[:30], now)
    next_key = sessions
    samples = []
    for _ in range(decisions):
        now += 0.01
        t0 = time.perf_counter()
        v = policy.victim(now, pinned)
        if v is not None:
            policy.remove(v)
        policy.admit(next_key, rng.randint(1, 2048) * 800 * KIB, now)
        samples.append(time.perf_counter() - t0)
        policy.observe_answer(next_key, rng.randint(5, 300), now)
        next_key += 1
    return {"decision_ms_p50": statistics.median(samples) * 1e3, "sessions": len(policy)}


def cache_only_turns_per_s(turns: list, policies: tuple[str, ...], dram_gib: float = 200.0,
                           sample_users: float | None = 0.3,
                           on_policy: Callable[[str], None] | None = None) -> dict[str, float]:
    """Turns per second of the cache-only replay (trace preparation excluded), per policy."""
    from bench.sim.cache import prepare_accesses, replay
    from kv_store.eviction.registry import make_policy

    log = prepare_accesses(turns, sample_users=sample_users)
    out: dict[str, float] = {}
    total_turns, total_s = 0, 0.0
    for name in policies:
        if on_policy is not None:
            on_policy(name)
        policy = make_policy(name, int(dram_gib * GIB))
        t0 = time.perf_counter()
        replay(log, policy, int(dram_gib * GIB))
        dt = time.perf_counter() - t0
        n = len(log)  # no window: every access is replayed
        out[name] = n / dt
        total_turns += n
        total_s += dt
    out["all"] = total_turns / total_s if total_s else 0.0
    return out
