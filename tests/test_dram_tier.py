"""The DRAM tier over real shared memory: exact accounting, regions kept while held, stale
region directories of dead stores swept."""
from __future__ import annotations

import os
import subprocess
import sys

from kv_store.dram_tier import DramTier, ShmPiece
from kv_store.shm_arena import ShmArena


def test_accounting_is_exact_and_regions_outlive_their_entry_while_held(tmp_path):
    arena = ShmArena(str(tmp_path), 10_000)
    dram = DramTier(arena)
    a, b = arena.create(3000), arena.create(2000)
    dram.put("s", [ShmPiece(a, 0, 3000)])
    dram.write_at("s", 3000, ShmPiece(b, 0, 2000))
    arena.unref(a), arena.unref(b)  # the creators' references: the entry holds them now
    assert dram.size("s") == 5000 and dram.used == 5000 and dram.free() == 5000
    held = dram.pieces("s", 4000)  # a reader takes the first 4000 bytes
    assert [(p.segment.name, p.length) for p in held] == [(a.name, 3000), (b.name, 1000)]
    dram.write_at("s", 1000, ShmPiece(c := arena.create(500), 0, 500))  # a diverged tail
    arena.unref(c)
    assert dram.size("s") == 1500 and dram.used == 5500  # b is held by the reader
    dram.drop("s")
    assert dram.used == 5000 and arena.path(a).exists() and arena.path(b).exists()
    dram.release(held)
    assert dram.used == 0 and not arena.path(a).exists() and not arena.path(b).exists()
    arena.close()


def test_names_are_never_reused(tmp_path):
    arena = ShmArena(str(tmp_path), 1 << 20)
    names = set()
    for _ in range(50):
        seg = arena.create(100)
        names.add(seg.name)
        arena.unref(seg)
    assert len(names) == 50
    arena.close()


def test_a_dead_stores_regions_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f"bidaw-store-{dead}-abcdef"
    stale.mkdir()
    (stale / "r1").write_bytes(b"x" * 100)
    live = tmp_path / f"bidaw-store-{os.getpid()}-123456"
    live.mkdir()
    arena = ShmArena(str(tmp_path), 1000)
    assert not stale.exists() and live.exists()
    arena.close()
