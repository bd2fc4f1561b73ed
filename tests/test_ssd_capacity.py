"""The SSD tier's capacity: left at the default, at most 90% of what the disk has room for
(a laptop or CI box with less than 64 GiB free used to warn at every start, and would meet a
full disk at each write past it); a size the operator gives is kept, with a WARNING when the
disk cannot hold it. The pure rule, then real stores on this machine's disk."""
from __future__ import annotations

import logging
import shutil

from kv_store.config import StoreConfig
from kv_store.main import start
from kv_store.ssd_capacity import DEFAULT_SSD_BYTES, capacity, held_bytes

GIB = 1 << 30


def test_the_default_takes_at_most_most_of_the_room_and_a_chosen_size_is_kept():
    assert DEFAULT_SSD_BYTES == 64 * GIB
    assert capacity(DEFAULT_SSD_BYTES, 10 * GIB) == 9 * GIB
    assert capacity(DEFAULT_SSD_BYTES, 10 * GIB + 12345) % (1 << 20) == 0
    assert capacity(DEFAULT_SSD_BYTES, 100 * GIB) == DEFAULT_SSD_BYTES
    assert capacity(200 * GIB, 10 * GIB) == 200 * GIB  # the operator's: kept (and warned of)
    assert capacity(4 * GIB, 10 * GIB) == 4 * GIB


def test_held_bytes_counts_the_tiers_session_files(tmp_path):
    (tmp_path / "sessions" / "ab").mkdir(parents=True)
    (tmp_path / "sessions" / "ab" / "x.kv").write_bytes(b"k" * 5000)
    (tmp_path / "sessions" / "cd").mkdir()
    (tmp_path / "sessions" / "cd" / "y.kv").write_bytes(b"k" * 700)
    (tmp_path / "other.txt").write_bytes(b"x" * 99)  # not the tier's
    assert held_bytes(tmp_path) == 5700


def _store(tmp_path, caplog, **fields):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bidaw.kv_store"):
        server, store = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                          dram_bytes=1 << 20, **fields))
    try:
        return store.ssd_bytes, store.stats()["ssd_capacity"], [
            (r.levelno, r.getMessage()) for r in caplog.records]
    finally:
        server.stop(0)
        store.close()


def test_a_real_store_at_the_default_fits_this_disk_without_a_warning(tmp_path, caplog):
    size, reported, lines = _store(tmp_path / "d", caplog)
    room = shutil.disk_usage(tmp_path).free  # (nothing held yet)
    assert size == reported
    assert abs(size - capacity(DEFAULT_SSD_BYTES, room)) < 256 << 20  # (the disk moves a bit)
    assert not [m for level, m in lines if level >= logging.WARNING], lines
    assert size == DEFAULT_SSD_BYTES or any("90% of the" in m for _, m in lines), lines


def test_a_size_the_disk_cannot_hold_is_kept_and_warned_of(tmp_path, caplog):
    size, reported, lines = _store(tmp_path / "d", caplog, ssd_bytes=1 << 60)
    assert size == reported == 1 << 60
    assert any(level == logging.WARNING and "less than --ssd-bytes" in m for level, m in lines)
