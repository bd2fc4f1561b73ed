"""Clients that say their user is typing, in the timed simulator (`--prepare-lead-s`,
bench/sim/prepared.py), on hand-made workloads whose answer is known."""
from __future__ import annotations

import pytest

import bench.sim.engine as engine
from bench.sim.cost_profile import load_profile
from bench.sim.engine import TimedSimulation
from bench.sim.prepare_hints import prepares
from bench.sim.prepared import Preparer
from bench.sim.systems import system_spec
from bench.sim.timed import simulate
from bench.sim.workload import OPEN, build_workload
from bench.traces import Turn

HISTORY = 1500  # tokens of each first turn: 0.62 GB of tensor 6, read in 0.41 s at 1.5 GB/s
TIERED = ["fcfs-lru", "bidaw", "bidaw-size", "bidaw-prefetch", "bidaw-no-io"]


def _cost(dram_gib: float, ssd_gbps: float = 1.5):
    return load_profile("opt13b-a800", {"host.dram_gib": dram_gib, "host.watermark_gib": 0,
                                        "host.ssd_read_gbps": ssd_gbps})


def _alternating() -> list[Turn]:
    """Two users taking turns every 30 s; DRAM (1 GiB) holds one KV (tensor 6), so each
    arrival evicts the other user's, who is back 30 s later, every time."""
    turns = [Turn(u, 30.0 * (u - 1) + 60.0 * r, HISTORY if r == 0 else 10, 10, r)
             for r in range(10) for u in (1, 2)]
    return sorted(turns, key=lambda t: t.time)


def _bidaw(lead, share=1.0, systems=("bidaw-size",), ssd_gbps=1.5):
    return simulate(_alternating(), list(systems), _cost(1.0, ssd_gbps), window=(100, 1000),
                    prepare_lead_s=lead, prepare_share=share)


# Users 1, 3, 6 have no preparing client at share 0.5; user 2 has one.
assert [prepares(u, 0.5) for u in (1, 2, 3, 6)] == [False, True, False, False]


def _lru_run(turns, lead, spy=None):
    """fcfs-lru (K/V: 0.42 GB for 510 tokens, read in 0.28 s) with DRAM for one KV; open
    arrivals at the trace times; half the users prepare; no end oracle."""
    w = build_workload(turns, window=(50, 1000), arrival_mode=OPEN)
    sim = TimedSimulation(w, _cost(0.5), system_spec("fcfs-lru"), end_oracle=False,
                          prepare_lead_s=lead, prepare_share=0.5)
    return sim, sim.run()


def _pushed_out() -> list[Turn]:
    """Users 1, 2, 3 each leave 510 tokens of K/V; user 3's pushes the others to SSD."""
    return [Turn(u, 10.0 * (u - 1), 500, 10, 0) for u in (1, 2, 3)]


def test_an_early_prepare_hits_at_arrival_and_cuts_the_ttft():
    before, after = _bidaw(None)["bidaw-size"], _bidaw(5.0)["bidaw-size"]
    assert (before["hits"], before["misses"]) == (0, 16)
    assert (after["hits"], after["misses"]) == (16, 0)
    assert after["prepared_reads"] == after["prepare_hits"] == 16
    # the same bytes, read before the turns came; no demand read left
    assert after["prepared_read_bytes"] == before["ssd_bytes_read"] > 0
    assert after["ssd_bytes_read"] == 0
    assert after["ttft_mean"] < 0.2 * before["ttft_mean"]


def test_a_late_prepare_is_waited_for_not_read_twice():
    # 0.1 s of warning for a 0.41 s read: each turn arrives during its own prepared read
    before, late = _bidaw(None)["bidaw-size"], _bidaw(0.1)["bidaw-size"]
    assert (late["hits"], late["misses"], late["prepare_hits"]) == (0, 16, 0)
    assert late["prepared_read_bytes"] == before["ssd_bytes_read"]  # each KV read once
    assert late["ssd_bytes_read"] == 0
    # 0.1 s of the read was done before the turn came
    assert before["ttft_mean"] - late["ttft_mean"] == pytest.approx(0.1, abs=1e-6)


def test_a_prepared_read_waits_behind_a_demand_load(monkeypatch):
    starts = []

    class Spy(Preparer):
        def maybe_start(self, now: float) -> None:
            idle = self.reading is None
            super().maybe_start(now)
            if idle and self.reading is not None:
                starts.append((now, self.reading, self.sim.reads_in_flight))

    monkeypatch.setattr(engine, "Preparer", Spy)
    # user 1 misses at 100 (a demand load, 0.28 s); user 2's client says so at 100.05
    turns = _pushed_out() + [Turn(1, 100.0, 10, 10, 1), Turn(2, 101.0, 10, 10, 1)]
    _, alone = _lru_run(turns, None)
    _, log = _lru_run(turns, 0.95)
    load = alone.load_s[0]
    assert log.load_s == alone.load_s[:1]  # user 1's demand load is not slowed
    assert starts == [(pytest.approx(100.0 + load, abs=1e-6), 2, 0)]
    assert (alone.hits, log.hits, log.prepares["prepare_hits"]) == (0, 1, 1)


def test_a_prepared_kv_is_pinned_until_its_turn():
    # user 2's KV lands at 71.3; user 6's first turn at 80 needs the DRAM; LRU would evict
    # user 2 (older), the pin evicts user 6's own KV instead
    turns = _pushed_out() + [Turn(6, 80.0, 500, 10, 0), Turn(2, 101.0, 10, 10, 1)]
    _, before = _lru_run(turns, None)
    sim, log = _lru_run(turns, 30.0)
    assert (before.hits, log.hits, log.prepares["prepare_hits"]) == (0, 1, 1)
    assert 2 in sim.store.dram and 6 not in sim.store.dram and 6 in sim.store.ssd
    assert not sim.prepared.held and not sim.store.pinned  # the pin ended with the turn


@pytest.mark.parametrize("system", TIERED)
def test_share_zero_and_a_prepare_at_the_arrival_change_nothing(system):
    base = _bidaw(None, systems=[system])[system]
    for lead, share in ((5.0, 0.0), (0.0, 1.0)):
        got = _bidaw(lead, share, systems=[system])[system]
        counts = {k: got.pop(k) for k in ("prepared_reads", "prepared_read_bytes",
                                          "prepare_hits", "prepared_handed_over")}
        assert counts == {"prepared_reads": 0, "prepared_read_bytes": 0, "prepare_hits": 0,
                          "prepared_handed_over": 0}
        got.pop("wall_s"), base.pop("wall_s", None)
        assert got == base


@pytest.mark.parametrize("system, dram_gib", [("fcfs-lru", 2.0), ("bidaw", 1.0),
                                              ("bidaw-size", 1.0), ("bidaw-prefetch", 1.0)])
def test_every_tiered_system_hits_what_its_clients_prepare(system, dram_gib):
    # DRAM for one user's KV (fcfs-lru stores K/V: 1.2 GB)
    res = simulate(_alternating(), [system, "ideal"], _cost(dram_gib), window=(100, 1000),
                   prepare_lead_s=5.0)
    got = res[system]
    assert got["prepare_hits"] == got["hits"] == got["prepared_reads"] == 16
    assert got["ssd_bytes_read"] == 0
    assert "prepared_reads" not in res["ideal"]  # nothing on SSD to prepare


def test_bidaw_prefetch_stops_guessing_for_users_whose_clients_prepare():
    guessed = _bidaw(None, systems=["bidaw-prefetch"])["bidaw-prefetch"]
    told = _bidaw(5.0, systems=["bidaw-prefetch"])["bidaw-prefetch"]
    assert guessed["prefetches"] == 16 and guessed["speculative_read_bytes"] > 0
    assert told["prefetches"] == told["speculative_read_bytes"] == 0
    assert told["prepare_hits"] == 16


def test_a_return_during_its_own_slow_prepared_read_recomputes_without_a_second_read():
    # 0.01 GB/s: a read takes a minute; bidaw-prefetch recomputes at arrival rather than wait
    w = build_workload(_alternating(), window=(100, 1000))
    sim = TimedSimulation(w, _cost(1.0, 0.01), system_spec("bidaw-prefetch"), end_oracle=True,
                          prepare_lead_s=5.0)
    got = sim.run().summary()
    assert got["turns"] == 16 and got["prepared_reads"] > 0 and got["prepare_hits"] == 0
    assert got["ssd_bytes_read"] == 0 and got["restore_choices"]["recompute"] > 0
    assert got["ttft_mean"] < 1.0  # nobody waited a minute for a read
    assert not sim.prepared.held  # a read its turn did not wait for is dropped, not pinned
    # each turn kept the end its read had landed in 5 s and the read stopped there
    assert got["prepared_handed_over"] == got["prepared_reads"] > 0
    assert got["prepared_read_bytes"] == pytest.approx(got["prepared_reads"] * 5.0 * 0.01e9)


def test_a_turn_that_arrives_during_its_prepared_read_keeps_the_end_it_landed():
    # 0.2 s of warning for a 0.44 s read (the KV is read end first): bidaw-prefetch keeps the
    # landed end and chooses for the rest; without suffix reads the landed part is wasted
    res = _bidaw(0.2, systems=["bidaw-prefetch", "bidaw-prefetch-prefix-only"])
    told, whole = res["bidaw-prefetch"], res["bidaw-prefetch-prefix-only"]
    assert told["prepared_handed_over"] == told["prepared_reads"] > 0
    assert whole["prepared_handed_over"] == 0
    choices = told["restore_choices"]
    assert choices["reversed"] + choices["recompute"] == told["prepared_handed_over"]
    full = whole["prepared_read_bytes"] / whole["prepared_reads"]  # a whole KV's bytes
    per_read = told["prepared_read_bytes"] / told["prepared_reads"]
    assert 0.2 * 1.5e9 <= per_read < 0.8 * full  # the landed end used, the rest partly never read
    assert told["ssd_bytes_read"] == whole["ssd_bytes_read"] == 0  # nothing read twice
    assert told["hits"] == whole["hits"]
    assert told["ttft_mean"] < 0.7 * whole["ttft_mean"]


def test_the_lead_and_share_are_checked():
    w = build_workload(_alternating())
    for lead, share, flag in ((-1.0, 1.0, "--prepare-lead-s"), (1.0, 2.0, "--prepare-share")):
        with pytest.raises(ValueError, match=flag):
            TimedSimulation(w, _cost(1.0), system_spec("bidaw"), prepare_lead_s=lead,
                            prepare_share=share)


@pytest.mark.parametrize("flags, error", [
    (["--prepare-lead-s", "-1"], "argument --prepare-lead-s: must be >= 0, got -1"),
    (["--prepare-lead-s", "5", "--prepare-share", "2"],
     "argument --prepare-share: must be in [0, 1], got 2"),
])
@pytest.mark.parametrize("mode", [[], ["--cache-only", "--ssd-gbps", "1.5"]])
def test_a_bad_flag_is_one_line_naming_it(mode, flags, error, capsys):
    from services.cli.main import main

    with pytest.raises(SystemExit) as err:
        main(["simulate", *mode, *flags])
    assert err.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"bidaw simulate: error: {error}"


def test_the_command_reports_the_prepares(tmp_path, capsys):
    import json

    from bench.traces.bidaw_format import write_bidaw
    from services.cli.main import main

    path = tmp_path / "trace.txt"
    write_bidaw(_alternating(), path)
    base = ["simulate", "--trace", str(path), "--format", "bidaw", "--window", "100:1000",
            "--set", "host.dram_gib=1", "--set", "host.watermark_gib=0", "--json"]
    assert main([*base, "--systems", "bidaw-size,ideal", "--prepare-lead-s", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["prepare_lead_s"], out["prepare_share"]) == (5.0, 1.0)
    assert out["systems"]["bidaw-size"]["prepare_hits"] == 16
    # the cache-only mode still wants a disk's time for a prepare to matter
    with pytest.raises(SystemExit, match="--prepare-lead-s needs --ssd-gbps"):
        main([*base, "--cache-only", "--prepare-lead-s", "5"])


@pytest.mark.parametrize("name, command", [
    ("simulate", ["simulate"]), ("simulate", ["simulate", "--cache-only"]),
    ("replay", ["replay", "--target", "127.0.0.1:1"]),
    ("bench live", ["bench", "live", "--systems", "bidaw"])])
def test_a_share_without_a_lead_is_refused_naming_both(name, command):
    from services.cli.main import main

    with pytest.raises(SystemExit) as err:  # before any trace is read or deployment started
        main([*command, "--trace", "/nonexistent/trace.txt", "--prepare-share", "0.5"])
    assert str(err.value) == (f"bidaw {name}: --prepare-share needs --prepare-lead-s (it is "
                              "the share of users whose clients prepare)")
