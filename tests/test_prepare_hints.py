"""A client says a turn is coming (`--prepare-lead-s`, POST /v1/sessions/{id}/prepare): its
schedule (bench/sim/prepare_hints.py) and the cache-only replay with SSD time that acts on it
(bench/sim/cache_bandwidth.py), on hand-made traces whose answers are worked out by hand."""
from __future__ import annotations

import pytest

from bench.sim.cache import prepare_accesses
from bench.sim.cache_bandwidth import replay_bandwidth
from bench.sim.prepare_hints import prepare_schedule
from bench.traces import Turn
from kv_store.eviction.registry import make_policy

SLOW = 1e-9  # GB/s: 1 byte per real second, so X trace seconds per byte at time scale X


def _log(turns):
    return prepare_accesses(turns, kv_bytes_per_token=1, max_kv_tokens=10_000)


def _replay(turns, scale, lead, cap=100, name="lru"):
    return replay_bandwidth(_log(turns), make_policy(name, cap, 0), cap, SLOW, scale, 0, None,
                            end_oracle=False, lookahead=0, prepare_lead_s=lead)


def _evict_then_return():
    # u1 holds 60 B; u2's 70 B push it out at t=3 (capacity 100); u1 is back at t=10 (62 B:
    # 6.2 trace seconds to read at time scale 0.1), then at t=20.
    return [Turn(1, 0, 30, 30, 0), Turn(2, 1, 35, 35, 0), Turn(1, 2, 1, 1, 1),
            Turn(2, 3, 1, 1, 1), Turn(1, 10, 1, 1, 2), Turn(1, 20, 1, 1, 3)]


def test_the_schedule_says_each_turn_lead_seconds_early_but_never_before_the_previous_turn():
    log = _log([Turn(1, 0, 5, 5, 0), Turn(2, 4, 3, 3, 0), Turn(1, 10, 1, 1, 1),
                Turn(2, 5, 1, 1, 1)])  # u2's second turn only 1 s after its first
    assert prepare_schedule(log, 3.0) == [(4, 2, 6), (7, 1, 10)]  # clamped to t=4; 10 - 3
    assert prepare_schedule(log, 0.0) == [(5, 2, 6), (10, 1, 10)]
    with pytest.raises(ValueError, match="--prepare-lead-s"):
        prepare_schedule(log, -1.0)


def test_a_share_of_users_have_clients_that_prepare_a_fixed_draw_per_user():
    turns = [Turn(u, 10 * r + u / 1000, 1, 1, r) for u in range(1000) for r in range(2)]
    log = _log(sorted(turns, key=lambda t: t.time))
    assert prepare_schedule(log, 1.0, 0.0) == []
    everyone = {u for _, u, _ in prepare_schedule(log, 1.0)}
    half = {u for _, u, _ in prepare_schedule(log, 1.0, 0.5)}
    assert everyone == set(range(1000)) and half < everyone
    assert 430 < len(half) < 570  # about half, drawn by user id
    assert half == {u for _, u, _ in prepare_schedule(log, 5.0, 0.5)}
    with pytest.raises(ValueError, match="--prepare-share"):
        prepare_schedule(log, 1.0, 1.5)


def test_a_prepare_early_enough_turns_the_miss_into_a_hit():
    plain = _replay(_evict_then_return(), 0.1, None)
    assert (plain.hits, plain.misses, plain.prepared_read_bytes) == (3, 1, 0)
    # said 6.8 trace seconds early (68 real s x 0.1): read from t=3.2 to 9.4, before t=10
    said = _replay(_evict_then_return(), 0.1, 68.0)
    assert (said.hits, said.misses, said.prepare_hits) == (4, 0, 1)
    assert said.prepared_read_bytes == said.ssd_read_bytes == 62
    assert said.as_dict()["demand_read_bytes"] == 0
    # said 6 trace seconds early: the read (t=4 to 10.2) is still in flight at t=10: a miss,
    # and no second read
    late = _replay(_evict_then_return(), 0.1, 60.0)
    assert (late.hits, late.misses, late.prepare_hits) == (3, 1, 0)
    assert late.prepared_read_bytes == late.ssd_read_bytes == 62
    # said at u1's previous turn (t=2, the earliest it can be), while its KV is in DRAM: it
    # stays there (u2's own KV goes instead), nothing is read and both of u1's turns hit
    early = _replay(_evict_then_return(), 0.1, 100.0)
    assert (early.hits, early.misses, early.ssd_read_bytes) == (4, 0, 0)


def test_a_prepared_read_not_begun_when_its_turn_arrives_is_a_demand_read():
    # u3's 100 B push out u1 and u2 (60 B each, LRU) at t=3. Said 5 s early at time scale 1
    # (1 s per byte): u1's read (62 B) runs from t=5 to 67, so u1 misses at t=10 with its
    # prepared read in flight; u2's, said at t=6, waits behind it and has not begun when u2
    # arrives at t=11: it becomes a demand read (62 B more), from t=67 to 129.
    turns = [Turn(1, 0, 30, 30, 0), Turn(2, 0.5, 30, 30, 0), Turn(1, 1, 1, 1, 1),
             Turn(2, 1.5, 1, 1, 1), Turn(3, 2, 60, 40, 0), Turn(3, 3, 1, 1, 1),
             Turn(1, 10, 1, 1, 2), Turn(2, 11, 1, 1, 2),
             Turn(4, 200, 1, 1, 0)]  # a newcomer, so that the replay runs on past t=129
    r = _replay(turns, 1.0, 5.0, cap=150)
    assert (r.prepared_reads, r.prepared_read_bytes) == (1, 62)
    assert r.as_dict()["demand_read_bytes"] == 62
    assert (r.misses, r.prepare_hits) == (2, 0)


def test_prepared_kv_is_pinned_until_its_turn():
    # Capacity 150. u1 (60 B) is pushed out at t=5 by u3's 40 B (LRU). Its turn at t=30 is
    # said 20 trace seconds early (200 real s x 0.1): its 62 B land at 16.2, pinned (u2 makes
    # the room). At t=21 u4's 120 B need room: were u1 an ordinary entry (last used at 16.2) it
    # would go after u3; pinned, it stays, and u1 hits at t=30.
    turns = [Turn(1, 0, 30, 30, 0), Turn(1, 1, 1, 1, 1), Turn(2, 2, 45, 45, 0),
             Turn(2, 3, 1, 1, 1), Turn(3, 4, 20, 20, 0), Turn(3, 5, 1, 1, 1),
             Turn(4, 20, 60, 60, 0), Turn(4, 21, 1, 1, 1), Turn(1, 30, 1, 1, 2)]
    r = _replay(turns, 0.1, 200.0, cap=150)
    assert (r.prepared_reads, r.prepare_hits) == (1, 1)
    assert r.misses == 0


def test_the_command_line_refuses_a_lead_without_a_disk_and_reports_prepared_reads(tmp_path):
    import json
    import subprocess
    import sys

    trace = tmp_path / "t.txt"  # time, user, query, answer, round
    trace.write_text("0 1 10 10 0\n5 1 10 10 1\n")
    base = [sys.executable, "-m", "services.cli.main", "simulate", "--cache-only", "--trace",
            str(trace), "--format", "bidaw", "--policies", "lru", "--dram-gib", "1",
            "--watermark-gib", "0", "--prepare-lead-s", "10"]
    out = subprocess.run(base, capture_output=True, text=True)
    assert out.returncode == 1 and "--prepare-lead-s needs --ssd-gbps" in out.stderr
    bad = subprocess.run(base[:-1] + ["-3", "--ssd-gbps", "1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--prepare-lead-s" in bad.stderr
    ok = subprocess.run(base + ["--ssd-gbps", "1", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["prepare_lead_s"] == 10.0
    assert {"prepared_read_bytes", "prepared_reads", "prepare_hits"} <= set(
        result["policies"]["lru"])
