"""The DRAM tier over a real shared-memory arena: exact accounting in pages, regions kept while
held and carved again only once free, neighbours merged, stale arenas of dead stores swept."""
from __future__ import annotations

import subprocess
import sys

from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.registry import make_policy
from kv_store.tiers.dram import DramTier, ShmPiece
from kv_store.tiers.shm_arena import ShmArena

PAGE = 4096


def test_accounting_is_exact_and_regions_outlive_their_entry_while_held(tmp_path):
    arena = ShmArena(str(tmp_path), 10 * PAGE)
    dram = DramTier(arena, TierLedger(make_policy("lru"), arena.capacity))
    a, b = arena.create(3 * PAGE), arena.create(2 * PAGE - 10)  # b takes two whole pages
    dram.put("s", [ShmPiece(a, 0, 3 * PAGE)], now=1.0)
    dram.write_at("s", 3 * PAGE, [ShmPiece(b, 0, 2 * PAGE - 10)], now=2.0)
    arena.unref(a), arena.unref(b)  # the creators' references: the entry holds them now
    assert dram.size("s") == 5 * PAGE - 10 and dram.used == 5 * PAGE
    held = dram.pieces("s", 4 * PAGE)  # a reader takes the first four pages
    assert [(p.segment, p.length) for p in held] == [(a, 3 * PAGE), (b, PAGE)]
    c = arena.create(PAGE)
    dram.write_at("s", PAGE, [ShmPiece(c, 0, PAGE)], now=3.0)  # a diverged tail
    arena.unref(c)
    assert dram.size("s") == 2 * PAGE and dram.used == 6 * PAGE  # b is held by the reader
    assert dram.ledger.used == 2 * PAGE  # the ledger counts entries, the arena whole segments
    dram.drop("s")
    assert "s" not in dram.ledger and dram.used == 5 * PAGE and not arena.fits(5 * PAGE + 1)
    dram.release(held)
    assert dram.used == 0 and arena.fits(10 * PAGE)  # freed runs merged back into one
    arena.close()


def test_a_held_region_is_never_carved_again(tmp_path):
    arena = ShmArena(str(tmp_path), 4 * PAGE)
    first = arena.create(2 * PAGE)
    arena.ref(first)  # a lease
    arena.unref(first)  # its entry went
    second = arena.create(2 * PAGE)
    assert second.offset != first.offset and arena.create(PAGE) is None  # full
    arena.unref(first)  # the lease went
    third = arena.create(2 * PAGE)
    assert third.offset == first.offset and len({first.name, second.name, third.name}) == 3
    arena.close()


def test_a_write_longer_than_any_free_run_takes_several_regions(tmp_path):
    arena = ShmArena(str(tmp_path), 10 * PAGE)
    held = [arena.create(2 * PAGE) for _ in range(5)]
    for segment in held[::2]:  # free runs of 2, 2 and 2 pages, none adjacent
        arena.unref(segment)
    assert arena.create(3 * PAGE) is None and arena.fits(6 * PAGE) and not arena.fits(6 * PAGE + 1)
    parts = arena.allocate(4 * PAGE + 100)
    assert [p.size for p in parts] == [2 * PAGE, 2 * PAGE, 100]  # all but the last whole
    assert len({p.offset for p in parts}) == 3 and arena.free() == PAGE
    assert arena.allocate(2 * PAGE) is None and arena.free() == PAGE  # nothing taken on refusal
    whole = arena.allocate(PAGE)
    assert len(whole) == 1 and arena.free() == 0
    arena.close()


def test_a_write_that_fits_one_free_run_stays_one_region(tmp_path):
    arena = ShmArena(str(tmp_path), 10 * PAGE)
    first, second = arena.create(4 * PAGE), arena.create(PAGE)
    arena.unref(first)  # runs of 4 and 5 pages: best fit is the 4
    parts = arena.allocate(3 * PAGE)
    assert len(parts) == 1 and parts[0].offset == first.offset
    arena.close()


def test_a_dead_stores_arena_is_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f"bidaw-store-{dead}-abcdef"
    stale.mkdir()
    (stale / "arena").write_bytes(b"x" * 100)
    live = ShmArena(str(tmp_path), PAGE)  # a live store's arena: it holds its lock
    arena = ShmArena(str(tmp_path), PAGE)
    assert not stale.exists() and live.dir.exists()
    arena.close()
    live.close()
