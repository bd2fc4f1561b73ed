"""The consistent-hash ring that scheduler and workers share."""
from __future__ import annotations

from collections import Counter

from services.runtime.hash_ring import HashRing

KEYS = [f"session-{i}" for i in range(5000)]


def test_same_members_same_owner_whatever_the_order():
    a = HashRing(["s1:1", "s2:1", "s3:1"])
    b = HashRing(["s3:1", "s1:1", "s2:1"])
    assert all(a.node_for(k) == b.node_for(k) for k in KEYS)


def test_adding_a_shard_moves_only_its_share():
    ring = HashRing(["a", "b", "c"])
    before = {k: ring.node_for(k) for k in KEYS}
    ring.add("d")
    moved = [k for k in KEYS if ring.node_for(k) != before[k]]
    assert all(ring.node_for(k) == "d" for k in moved)  # only onto the new shard
    assert 0.15 < len(moved) / len(KEYS) < 0.35  # about 1/4
    ring.remove("d")
    assert all(ring.node_for(k) == before[k] for k in KEYS)  # and back


def test_load_is_spread_and_empty_ring_has_no_owner():
    counts = Counter(HashRing(["a", "b", "c", "d"]).node_for(k) for k in KEYS)
    assert min(counts.values()) > 0.15 * len(KEYS)
    assert HashRing().node_for("x") is None
