"""ScatterView: one image over several buffers, byte for byte the same as a contiguous one."""
from __future__ import annotations

import os

import pytest

from kv_store.tiers.scatter import Layout, ScatterView


def test_spans_cover_a_range_across_buffers_in_order():
    layout = Layout([4, 3, 5])
    assert list(layout.spans(0, 12)) == [(0, 0, 4), (1, 0, 3), (2, 0, 5)]
    assert list(layout.spans(3, 8)) == [(0, 3, 1), (1, 0, 3), (2, 0, 1)]
    assert list(layout.spans(7, 7)) == [] and list(layout.spans(10, 99)) == [(2, 3, 2)]


def test_reads_and_writes_match_a_contiguous_buffer():
    data = os.urandom(10_000)
    bufs = [bytearray(4096), bytearray(4096), bytearray(4096)]
    view = ScatterView(bufs, len(data))
    view.write(0, data)
    assert view.read(0, len(data)) == data
    assert b"".join(bytes(c) for c in view.chunks(4000, 9000)) == data[4000:9000]
    assert view.read(4090, 4100) == data[4090:4100]  # across a boundary
    view.write(4094, b"XYZW")
    assert view.read(4094, 4098) == b"XYZW" and bufs[1][:2] == bytearray(b"ZW")
    with pytest.raises(ValueError):
        view.write(9998, b"abcd")  # past nbytes
    with pytest.raises(ValueError):
        ScatterView([bytearray(10)], 11)
