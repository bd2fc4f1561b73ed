"""The SSD tier on real files: aligned records, the divergence log, verified reads, start-up scan,
the O_DIRECT fallback and the bandwidth cap."""
from __future__ import annotations

import errno
import os
import time
import zlib

import pytest

from kv_store.tiers import aligned_io

from kv_store.tiers import ssd_record
from kv_store.tiers.aligned_io import ALIGN, aligned_buffer
from kv_store.tiers.bandwidth import BandwidthCap
from kv_store.tiers.ssd import SsdTier


def append(tier: SsdTier, sid: str, offset: int, start: int, tokens: list[int], payload: bytes,
           bpt: int = 10) -> int:
    header = ssd_record.encode_header(sid, 1, start, bpt, "m", tokens, len(payload),
                                      zlib.crc32(payload))
    return tier.append(sid, offset, header, memoryview(payload), False)


def read_all(tier: SsdTier, sid: str):
    length = tier.file_bytes[sid]
    buf = aligned_buffer(length)
    result = tier.read(sid, length, buf)
    data = b"".join(bytes(buf[p.offset:p.offset + p.length]) for p in result.log.pieces)
    return result, data


@pytest.fixture
def tier(tmp_path):
    t = SsdTier(tmp_path, io_bytes=8192, read_depth=2)
    yield t
    t.close()


def test_records_are_aligned_and_replay_divergence(tier):
    end = append(tier, "s", 0, 0, [1, 2, 3, 4], b"a" * 40)
    assert end % ALIGN == 0 and tier.path("s").stat().st_size == end
    end = append(tier, "s", end, 4, [5], b"b" * 10)
    end = append(tier, "s", end, 2, [7, 8], b"c" * 20)  # history diverged after token 2
    result, data = read_all(tier, "s")
    assert not result.corrupt and result.valid_end == end
    assert result.log.meta.token_ids == [1, 2, 7, 8] and data == b"a" * 20 + b"c" * 20
    assert result.log.end > sum(p.length for p in result.log.pieces)  # replaced bytes stay


def test_a_flipped_byte_keeps_only_the_records_before_it(tier):
    end1 = append(tier, "s", 0, 0, [1, 2], b"x" * 20)
    end2 = append(tier, "s", end1, 2, [3, 4], b"y" * 20)
    append(tier, "s", end2, 4, [5], b"z" * 10)
    with open(tier.path("s"), "r+b") as fh:  # corrupt the second record's payload
        fh.seek(end1 + ALIGN + 3)
        fh.write(b"Q")
    result, data = read_all(tier, "s")
    assert result.corrupt.startswith("payload checksum mismatch")
    assert result.valid_end == end1 and result.log.meta.token_ids == [1, 2] and data == b"x" * 20


def test_scan_rebuilds_and_cuts_a_torn_tail(tmp_path, tier):
    end = append(tier, "s", 0, 0, [1, 2], b"x" * 20)
    append(tier, "s", end, 2, [3], b"y" * 10)
    append(tier, "other", 0, 0, [9], b"o" * 10)
    with open(tier.path("s"), "r+b") as fh:
        fh.truncate(end + 100)  # a torn append: part of the header only
    fresh = SsdTier(tmp_path)
    found = {log.meta.session_id: (log.meta.token_ids, length) for log, length in fresh.scan()}
    assert found["s"] == ([1, 2], end) and found["other"][0] == [9]
    assert tier.path("s").stat().st_size == end
    fresh.close()


def test_buffered_fallback_when_the_filesystem_refuses_o_direct(tmp_path, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real_open(path, flags, *args)

    monkeypatch.setattr(aligned_io.os, "open", no_direct)
    tier = SsdTier(tmp_path)
    end = append(tier, "s", 0, 0, [1, 2, 3], b"k" * 30)
    result, data = read_all(tier, "s")
    assert data == b"k" * 30 and result.valid_end == end
    tier.close()


def test_bandwidth_cap_paces_reads(tmp_path):
    payload = os.urandom(2 << 20)
    capped = SsdTier(tmp_path, io_bytes=256 << 10, cap=BandwidthCap(8e6, burst=256 << 10))
    append(capped, "s", 0, 0, list(range(len(payload) // 1024)), payload, bpt=1024)
    start = time.monotonic()
    _, data = read_all(capped, "s")
    assert data == payload
    assert time.monotonic() - start > 0.15  # 2 MiB at 8 MB/s, less one burst: ~0.23 s
    capped.close()


def test_a_cap_without_burst_banks_no_idle_time():
    """burst 0: a disk that reads at one rate, idle or not; one read's burst: after idle time
    that read is free (the default, which favours a mostly idle disk)."""
    strict, bursty = BandwidthCap(1e6, burst=0), BandwidthCap(1e6, burst=10**6)
    assert strict.reserve(10**6, 0.0) == pytest.approx(1.0)
    assert strict.reserve(10**6, 0.0) == pytest.approx(2.0)  # queued behind the first
    assert strict.reserve(10**6, 60.0) == pytest.approx(1.0)  # a minute idle: no faster
    assert bursty.reserve(10**6, 0.0) == 0.0
    assert bursty.reserve(10**6, 60.0) == 0.0
    assert bursty.reserve(10**6, 60.0) == pytest.approx(1.0)


def test_page_aligned_payloads_go_straight_from_memory(tier):
    """A payload in page-aligned memory (a DRAM segment) is written without a copy, whole
    pages or not."""
    end = 0
    tokens: list[int] = []
    expect = b""
    for n in (2, 3, 1):  # 8192, 12288 and 4096 bytes: exact pages, no tail
        payload = aligned_buffer(n * 4096)
        payload[:] = os.urandom(n * 4096)
        header = ssd_record.encode_header("p", 1, len(tokens), 4096, "m", list(range(n)),
                                          n * 4096, zlib.crc32(payload))
        end = tier.append("p", end, header, memoryview(payload), True)
        tokens += list(range(n))
        expect += bytes(payload)
        assert tier.path("p").stat().st_size == end
    result, data = read_all(tier, "p")
    assert not result.corrupt and data == expect
