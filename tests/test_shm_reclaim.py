"""A killed store's DRAM arena is reclaimed by the next store, even while the dead one is still
an unreaped zombie; a live store's arena never is, whatever its pid looks like."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kv_store.tiers.shm_arena import ShmArena

PAGE = 4096
HOLDER = ("import sys, time; from kv_store.tiers.shm_arena import ShmArena; "
          "a = ShmArena(sys.argv[1], 4 * 4096); print(a.dir.name, flush=True); time.sleep(60)")


def _holder(root) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    return proc, proc.stdout.readline().strip()


def test_a_zombie_stores_arena_is_reclaimed(tmp_path):
    proc, name = _holder(tmp_path)
    assert (tmp_path / name / "arena").exists()
    os.kill(proc.pid, signal.SIGKILL)
    while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)  # dead, not reaped: os.kill(pid, 0) still succeeds on it
    arena = ShmArena(str(tmp_path), PAGE)
    try:
        assert not (tmp_path / name).exists()
    finally:
        arena.close()
        proc.wait()


def test_a_live_stores_arena_is_kept(tmp_path):
    proc, name = _holder(tmp_path)
    try:
        arena = ShmArena(str(tmp_path), PAGE)
        assert (tmp_path / name / "arena").exists()
        arena.close()
    finally:
        proc.kill()
        proc.wait()


def test_an_unlocked_arena_named_for_this_process_is_stale(tmp_path):
    # A restarted container's store can get its predecessor's pid.
    stale = tmp_path / f"bidaw-store-{os.getpid()}-abcdef"
    stale.mkdir()
    (stale / "arena").write_bytes(b"x" * PAGE)
    arena = ShmArena(str(tmp_path), PAGE)
    try:
        assert not stale.exists() and arena.dir.exists()
    finally:
        arena.close()
