"""The ghost cache replays the recent past under Belady and learns per-bucket hit rates."""
from __future__ import annotations

from kv_store.eviction.ghost_cache import GhostCache


def _ghost(cap: int = 2, lag: float = 100.0, window: float = 1e12) -> GhostCache:
    # unit sizes, evict only when over capacity, no decay, no prior
    return GhostCache(cap, n_buckets=3, watermark_bytes=0, lag_s=lag, window=window, prior_weight=0.0)


def test_hit_rates_of_a_hand_computed_belady_replay():
    g = _ghost()
    # A B C A B C, capacity 2. Belady: C (next use furthest) is dropped at once; A and B hit;
    # the last C misses. Buckets: the re-access of A in 1, of B and C in 2; first accesses: None.
    for t, (key, bucket) in enumerate([("A", None), ("B", None), ("C", None),
                                       ("A", 1), ("B", 2), ("C", 2)]):
        g.record(key, 1, bucket, float(t))
    assert g.replayed == 0  # nothing is old enough yet: the future is not known
    g.advance(1000.0)
    assert g.replayed == 6
    assert g.hit_rate(1) == 1.0
    assert abs(g.hit_rate(2) - 0.5) < 1e-9
    assert g.hit_rate(0) == 0.5  # no samples: the prior value


def test_next_use_learned_after_replay_is_used():
    # lag 0: each access is replayed at once with an unknown next use, then corrected when the
    # key comes back. Capacity 1: A stays (it comes back next), B is dropped.
    g = _ghost(cap=1, lag=0.0)
    g.record("A", 1, None, 0.0)
    g.record("A", 1, 1, 1.0)
    assert g.hit_rate(1) == 1.0


def test_sessions_that_never_return_are_evicted_first():
    g = _ghost(cap=2)
    seq = [("X", None), ("A", None), ("B", None), ("A", 1), ("B", 1)]
    for t, (k, b) in enumerate(seq):
        g.record(k, 1, b, float(t))
    g.advance(1000.0)
    assert g.hit_rate(1) == 1.0  # X (never back) made room, not A or B


def test_decay_follows_the_recent_past():
    g = GhostCache(1, n_buckets=2, watermark_bytes=0, lag_s=0.0, window=10.0, prior_weight=0.0)
    t = 0.0
    # Phase 1: A,B alternate with capacity 1 -> Belady hits half of the re-accesses.
    for i in range(200):
        g.record("AB"[i % 2], 1, None if i < 2 else 1, t)
        t += 1
    first = g.hit_rate(1)
    # Phase 2: only A -> every access hits.
    for _ in range(200):
        g.record("A", 1, 1, t)
        t += 1
    assert first < 0.6
    assert g.hit_rate(1) > 0.99


def test_capacity_change_takes_effect():
    g = _ghost(cap=1)
    g.set_capacity(3)
    for t, (k, b) in enumerate([("A", None), ("B", None), ("C", None), ("A", 1), ("B", 1), ("C", 1)]):
        g.record(k, 1, b, float(t))
    g.advance(1000.0)
    assert g.hit_rate(1) == 1.0
    assert len(g) == 3
