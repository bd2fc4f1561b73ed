"""The scheduling queues: disk-HRRN order, anti-starvation, arrival-order promotion, FCFS blocking."""
from __future__ import annotations

import random

import pytest

from scheduler.policy import (LOADING, READY, WAITING, DualQueue, FCFSQueue, QUEUE_POLICIES,
                              QueueConfig, make_queue)


def _load_order(q, now: float, n: int) -> list:
    """Start and finish `n` loads one by one at `now`; the order they were picked in."""
    out = []
    for _ in range(n):
        req = q.next_load(now, 0)
        out.append(req.request_id)
        q.load_finished(req.request_id)
    return out


def test_registry_names_and_unknown():
    assert set(QUEUE_POLICIES) == {"bidaw", "fcfs"}
    assert isinstance(make_queue("bidaw"), DualQueue)
    assert isinstance(make_queue("fcfs", prefetch_window=30), FCFSQueue)
    with pytest.raises(ValueError):
        make_queue("sjf")


def test_one_queue_config_builds_every_policy():
    fcfs = QueueConfig("fcfs", max_concurrent_loads=3, prefetch_window=30, ssd_aware=False).build()
    assert isinstance(fcfs, FCFSQueue)
    assert (fcfs.max_concurrent_loads, fcfs.prefetch_window, fcfs.ssd_aware) == (3, 30, False)
    bidaw = QueueConfig("bidaw", max_concurrent_loads=3, prefetch_window=30).build()
    assert isinstance(bidaw, DualQueue) and bidaw.max_concurrent_loads == 3  # fcfs knob ignored
    with pytest.raises(TypeError):
        make_queue("bidaw", window=30)  # not a knob of any queue
    with pytest.raises(ValueError):
        make_queue("fcfs", prefetch_window=-1)  # still checked by the queue itself


def test_disk_hrrn_prefers_small_kv_at_equal_wait():
    q = DualQueue(max_concurrent_loads=1)
    for rid, size in (("big", 3000), ("small", 1000), ("mid", 2000)):
        q.add(rid, rid, len(q) + 1, 0.0, "ssd", size)
    assert _load_order(q, 10.0, 3) == ["small", "mid", "big"]


def test_disk_hrrn_ties_at_zero_wait_go_to_smaller_kv():
    q = DualQueue(max_concurrent_loads=1)
    q.add("a", "a", 1, 5.0, "ssd", 900)
    q.add("b", "b", 2, 5.0, "ssd", 100)
    assert q.next_load(5.0, 0).request_id == "b"  # every R is 1 at zero wait


def test_disk_hrrn_ratio_lets_a_long_waiting_large_kv_go_first():
    q = DualQueue(max_concurrent_loads=1)
    q.add("large", "L", 1, 0.0, "ssd", 1000)    # R(100) = 1 + 100/1000 = 1.1
    q.add("small", "S", 2, 99.0, "ssd", 100)    # R(100) = 1 + 1/100 = 1.01
    assert q.hrrn_ratio("large", 100.0) == pytest.approx(1.1)
    assert q.hrrn_ratio("small", 100.0) == pytest.approx(1.01)
    assert q.next_load(100.0, 0).request_id == "large"


def test_disk_hrrn_large_kv_cannot_starve():
    """A stream of small loads (one per second, each taking a second) never starves a large one;
    shortest-first would. R_large = 1 + t/100 overtakes the smalls' ~1 + 1/1 by t ≈ 100 s."""
    q = DualQueue(max_concurrent_loads=1)
    q.add("large", "L", 1, 0.0, "ssd", 100)
    seq = 1
    picked_at = None
    for t in range(1, 1000):
        seq += 1
        q.add(f"s{t}", f"s{t}", seq, float(t) - 1.0, "ssd", 1)
        req = q.next_load(float(t), 0)
        q.load_finished(req.request_id)
        q.pop_ready()
        if req.request_id == "large":
            picked_at = t
            break
    assert picked_at is not None and picked_at <= 110


def test_max_concurrent_loads_is_respected():
    q = DualQueue(max_concurrent_loads=2)
    for i in range(5):
        q.add(i, i, i + 1, 0.0, "ssd", 10)
    assert q.next_load(1.0, 0) is not None
    assert q.next_load(1.0, 1) is not None
    assert q.next_load(1.0, 2) is None
    assert q.lengths() == {READY: 0, WAITING: 3, LOADING: 2}


def test_promotion_goes_back_to_original_arrival_position():
    q = DualQueue(max_concurrent_loads=1)
    q.add(1, "a", 1, 0.0, "dram", 0)
    q.add(2, "b", 2, 0.1, "ssd", 500)
    q.add(3, "c", 3, 0.2, "none", 0)
    q.add(4, "d", 4, 0.3, "dram", 0)
    assert q.pop_ready().request_id == 1
    assert q.next_load(1.0, 0).request_id == 2
    q.load_finished(2)
    # 2 arrived before 3 and 4: it is served before them, not at the tail
    assert [q.pop_ready().request_id for _ in range(3)] == [2, 3, 4]
    assert q.pop_ready() is None and len(q) == 0


def test_dual_queue_ready_requests_never_wait_behind_a_load():
    q = DualQueue()
    q.add("ssd", "x", 1, 0.0, "ssd", 10**9)
    q.add("hit", "y", 2, 0.1, "dram", 0)
    assert q.pop_ready().request_id == "hit"
    assert q.pop_ready() is None  # the SSD one is not ready until loaded


def test_fcfs_head_of_line_blocking():
    q = FCFSQueue(max_concurrent_loads=1, prefetch_window=1)
    q.add("head", "x", 1, 0.0, "ssd", 10**9)
    q.add("hit", "y", 2, 0.1, "dram", 0)
    q.add("later", "z", 3, 0.2, "ssd", 10)
    assert q.peek_ready() is None and q.pop_ready() is None  # head blocks the ready one behind
    assert q.next_load(1.0, 0).request_id == "head"          # window 1: only the head loads
    assert q.next_load(1.0, 0) is None
    q.load_finished("head")
    assert [q.pop_ready().request_id for _ in range(2)] == ["head", "hit"]
    assert q.pop_ready() is None                              # "later" is now the blocked head
    assert q.next_load(2.0, 0).request_id == "later"


def test_fcfs_unaware_of_ssd_dispatches_in_arrival_order_and_never_loads():
    q = FCFSQueue(max_concurrent_loads=2, prefetch_window=1, ssd_aware=False)
    q.add("head", "x", 1, 0.0, "ssd", 10**9)
    q.add("hit", "y", 2, 0.1, "dram", 0)
    q.add("busy", "z", 3, 0.2, "loading", 10)
    assert q.lengths() == {"ready": 3, "waiting": 0, "loading": 0}
    assert q.next_load(1.0, 0) is None              # the worker reads SSD itself
    assert q.kv_evicted("hit", 10**6) is None       # where KV went does not matter to it
    assert q.get("hit").state == READY
    assert [q.pop_ready().request_id for _ in range(3)] == ["head", "hit", "busy"]
    assert q.pop_ready() is None and len(q) == 0


def test_fcfs_prefetch_window_loads_in_arrival_order():
    q = FCFSQueue(max_concurrent_loads=3, prefetch_window=3)
    q.add(1, "a", 1, 0.0, "dram", 0)
    q.add(2, "b", 2, 0.0, "ssd", 10**6)
    q.add(3, "c", 3, 0.0, "ssd", 1)      # small, but arrival order rules in FCFS
    q.add(4, "d", 4, 0.0, "ssd", 1)      # outside the window of 3
    assert q.next_load(1.0, 0).request_id == 2
    assert q.next_load(1.0, 1).request_id == 3
    assert q.next_load(1.0, 2) is None
    q.pop_ready()                        # 1 leaves: 4 enters the window
    assert q.next_load(1.0, 2).request_id == 4


def test_fcfs_unlimited_prefetch_window():
    q = FCFSQueue(max_concurrent_loads=10, prefetch_window=0)
    for i in range(50):
        q.add(i, i, i + 1, 0.0, "ssd", 1)
    assert [q.next_load(1.0, k).request_id for k in range(10)] == list(range(10))


@pytest.mark.parametrize("name", QUEUE_POLICIES)
def test_upcoming_remove_and_kv_evicted(name):
    q = make_queue(name, max_concurrent_loads=4, **({"prefetch_window": 0} if name == "fcfs" else {}))
    for i, where in enumerate(["dram", "ssd", "none", "ssd", "dram"]):
        q.add(i, f"s{i}", i + 1, float(i), where, 100 * (i + 1))
    assert q.upcoming(3) == ["s0", "s1", "s2"]
    assert q.remove(1).request_id == 1 and q.remove(1) is None
    assert q.upcoming(10) == ["s0", "s2", "s3", "s4"]
    assert q.kv_evicted(0, 123) is not None            # a DRAM hit lost its KV: back to waiting
    assert q.get(0).state == WAITING and q.get(0).kv_bytes == 123
    assert q.kv_evicted(3, 1) is None                   # not READY: ignored
    loads = []
    while (r := q.next_load(10.0, len(loads))) is not None:
        loads.append(r.request_id)
    assert sorted(loads) == [0, 3]
    for rid in loads:
        q.load_finished(rid)
    order = [q.pop_ready().request_id for _ in range(4)]
    assert order == [0, 2, 3, 4] and len(q) == 0 and q.upcoming(5) == []


def test_add_validates():
    q = DualQueue()
    q.add(1, "a", 5, 0.0, "dram", 0)
    with pytest.raises(ValueError):
        q.add(1, "a", 6, 0.0, "dram", 0)   # duplicate id
    with pytest.raises(ValueError):
        q.add(2, "b", 5, 0.0, "dram", 0)   # seq must increase
    with pytest.raises(ValueError):
        q.add(3, "c", 7, 0.0, "tape", 0)
    assert len(q) == 1 and 1 in q


def test_dual_queue_matches_a_brute_force_reference():
    """Random arrivals, loads, completions, dispatches and cancels against a naive model."""
    rng = random.Random(7)
    q = DualQueue(max_concurrent_loads=3)
    ref: dict[int, dict] = {}  # id -> {seq, t, size, state}
    loading: set[int] = set()
    seq, now = 0, 0.0
    for _ in range(4000):
        now += rng.random()
        op = rng.random()
        if op < 0.4:
            seq += 1
            where = rng.choice(["dram", "ssd", "ssd", "none"])
            size = rng.randint(1, 5000)
            q.add(seq, seq, seq, now, where, size)
            ref[seq] = {"seq": seq, "t": now, "size": size,
                        "state": WAITING if where == "ssd" else READY}
        elif op < 0.6:
            got = q.next_load(now, len(loading))
            waiting = [r for r in ref.values() if r["state"] == WAITING]
            if len(loading) >= 3 or not waiting:
                assert got is None
            else:
                best = max(waiting, key=lambda r: ((now - r["t"]) / r["size"], -r["size"], -r["seq"]))
                assert got.request_id == best["seq"]
                ref[best["seq"]]["state"] = LOADING
                loading.add(best["seq"])
        elif op < 0.75 and loading:
            rid = rng.choice(sorted(loading))
            loading.discard(rid)
            q.load_finished(rid)
            ref[rid]["state"] = READY
        elif op < 0.95:
            got = q.pop_ready()
            ready = [r for r in ref.values() if r["state"] == READY]
            if not ready:
                assert got is None
            else:
                first = min(ready, key=lambda r: r["seq"])
                assert got.request_id == first["seq"]
                del ref[first["seq"]]
        elif ref:
            rid = rng.choice(sorted(ref))
            q.remove(rid)
            loading.discard(rid)
            del ref[rid]
        assert len(q) == len(ref)
        assert q.upcoming(5) == sorted(ref)[:5]
