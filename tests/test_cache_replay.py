"""`bidaw bench cache-replay`: live per-turn records through the store's eviction policies."""
from __future__ import annotations

import json

import pytest

from bench.replay.cache_replay import (DISPATCH, END, PAGE, SEND, cache_events, live_hit_rate,
                                       replay_cache)
from bench.replay.records import ANSWERED, TurnRecord, write_jsonl
from kv_store.eviction.registry import make_policy
from services.cli.main import main


def rec(session, index, sent, end, history, stored, answer=1, tier="", queue=0.0):
    """One answered turn; sizes in pages (the tests use one page of KV per token)."""
    return TurnRecord(user=0, index=index, session=session, trace_round=index,
                      history_tokens=history, query_tokens=1, answer_tokens=answer, think_s=0.0,
                      scheduled_s=sent, status=ANSWERED, sent_s=sent, end_s=end,
                      prompt_tokens=stored - answer, completion_tokens=answer,
                      tier_at_arrival=tier, queue_s=queue)


def test_lru_over_ten_pages_evicts_the_least_recent_and_counts_hits():
    records = [rec("a", 0, 0, 1, 0, 4), rec("b", 0, 2, 3, 0, 5),
               rec("c", 0, 4, 5, 0, 4),   # no room: a (least recent) goes
               rec("a", 1, 6, 7, 4, 6),   # a miss; b goes to bring a back, then a grows
               rec("c", 1, 8, 9, 4, 5)]   # a hit; c grows, a goes (c is leased)
    out = replay_cache(cache_events(records, PAGE), make_policy("lru"), 10 * PAGE)
    assert (out.hits, out.misses, out.evictions) == (1, 1, 3)
    assert out.hit_rate == 0.5


def test_a_miss_is_read_in_at_dispatch_not_at_send():
    records = [rec("a", 0, 0, 1, 0, 6), rec("b", 0, 2, 3, 0, 4),
               rec("c", 0, 4, 5, 0, 4),                 # a goes
               rec("a", 1, 6, 12, 6, 6, queue=4.0),     # a miss, queued until 10
               rec("b", 1, 7, 8, 4, 4)]                 # so b is still there at 7: a hit
    out = replay_cache(cache_events(records, PAGE), make_policy("lru"), 10 * PAGE)
    assert (out.hits, out.misses) == (1, 1)
    assert out.evictions == 2  # a at 5; at 10 a's read evicts c (b was used at 8)


def test_a_session_with_a_turn_in_flight_is_never_a_victim():
    records = [rec("a", 0, 0, 1, 0, 6),
               rec("a", 1, 2, 10, 6, 6),  # a hit, leased until 10
               rec("b", 0, 3, 4, 0, 6),   # no room without evicting a: b stays on SSD
               rec("b", 1, 5, 6, 6, 6)]   # so this is a miss, and still no room
    out = replay_cache(cache_events(records, PAGE), make_policy("lru"), 10 * PAGE)
    assert (out.hits, out.misses, out.evictions) == (1, 1, 0)


def test_events_skip_unanswered_turns_and_live_rate_counts_looked_up_ones():
    failed = rec("x", 0, 0, 1, 0, 3)
    failed.status = "error"
    records = [failed, rec("a", 1, 0, 1, 5, 6, tier="dram"), rec("b", 1, 0, 1, 5, 6, tier="ssd"),
               rec("c", 0, 0, 1, 0, 2, tier="none")]
    events = cache_events(records, 100)
    assert len(events) == 9 and all(e.session != "x" for e in events)
    assert [e.kind for e in events] == [SEND] * 3 + [DISPATCH] * 3 + [END] * 3
    assert events[0].nbytes == PAGE  # 500 bytes rounds up to a page
    assert live_hit_rate(records) == 0.5
    assert live_hit_rate([rec("a", 0, 0, 1, 0, 2)]) is None


def test_cli_prints_every_policy_and_the_live_rate(tmp_path, capsys):
    path = tmp_path / "bidaw.jsonl"
    write_jsonl([rec("a", 0, 0, 1, 0, 4), rec("b", 0, 2, 3, 0, 5), rec("c", 0, 4, 5, 0, 4),
                 rec("a", 1, 6, 7, 4, 6, tier="ssd"), rec("c", 1, 8, 9, 4, 5, tier="dram")],
                path)
    argv = ["bench", "cache-replay", "--records", str(path), "--dram-bytes", str(10 * PAGE),
            "--bytes-per-token", str(PAGE), "--time-scale", "0.5", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["turns"] == 5 and out["live_hit_rate"] == 0.5
    assert set(out["policies"]) == {"fifo", "lru", "queue-aware", "bidaw", "bidaw-size"}
    assert out["policies"]["lru"] == {"hit_rate": 0.5, "hits": 1, "misses": 1, "evictions": 3}
    assert main(argv[:-1] + ["--policies", "lru"]) == 0
    table = capsys.readouterr().out
    assert "lru" in table and "live store" in table and "bidaw" not in table


@pytest.mark.parametrize("flags, message", [
    (["--dram-bytes", "lots"], "--dram-bytes"),
    (["--dram-bytes", "0"], "--dram-bytes"),
    (["--policies", "belady"], "--policies"),
    (["--time-scale", "0"], "--time-scale"),
])
def test_cli_bad_flags_name_the_flag(tmp_path, flags, message, capsys):
    path = tmp_path / "r.jsonl"
    write_jsonl([rec("a", 0, 0, 1, 0, 4)], path)
    argv = ["bench", "cache-replay", "--records", str(path), "--dram-bytes", "1MiB", *flags]
    with pytest.raises(SystemExit) as refused:
        main(argv)
    # the command's own message, or argparse's usage error (exit 2) on stderr
    said = refused.value.code if isinstance(refused.value.code, str) else capsys.readouterr().err
    assert message in said


def test_cli_unreadable_records_name_the_flag(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    for path in (bad, tmp_path / "missing.jsonl"):
        with pytest.raises(SystemExit, match="--records"):
            main(["bench", "cache-replay", "--records", str(path), "--dram-bytes", "1MiB"])
