"""A full disk under the SSD tier: the store evicts to make room, refuses with RESOURCE_EXHAUSTED
when it cannot, and keeps serving. The disk is a real 2 MiB tmpfs where the machine lets us mount
one, and a size limit on the directory injected at the write call (ENOSPC past 2 MiB)."""
from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess

import grpc
import pytest

from compute_worker.kv_client import KVClient
from kv_store.tiers import aligned_io
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

KV = common_pb2.KV_FORMAT_KV
LIMIT = 2 << 20
BPT, TOKENS = 4096, 100  # 400 KiB a session: the disk holds four


def _dir_bytes(root) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root)
               for f in files)


@pytest.fixture(params=["tmpfs", "injected"])
def small_disk(request, tmp_path, monkeypatch):
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = request.param == "tmpfs" and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={LIMIT}", "tmpfs", str(mount)],
        capture_output=True).returncode == 0
    if request.param == "tmpfs" and not mounted:
        pytest.skip("cannot mount a tmpfs here (not root?): the injected variant covers it")
    if not mounted:
        real = aligned_io.DirectFile.pwrite_all

        def limited(self, buffers, offset):
            size = sum(len(b) for b in buffers)
            grow = max(offset + size - os.fstat(self.fd).st_size, 0)
            if _dir_bytes(mount) + grow > LIMIT:
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return real(self, buffers, offset)

        monkeypatch.setattr(aligned_io.DirectFile, "pwrite_all", limited)
    yield mount
    if mounted:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_evicts_then_refuses_and_keeps_serving(small_disk):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(small_disk),
                                     dram_bytes=0, ssd_bytes=1 << 30))  # the disk is the bound
    client = KVClient(f"127.0.0.1:{server.port}")
    try:
        data = {f"s{i}": os.urandom(BPT * TOKENS) for i in range(8)}
        for sid, payload in data.items():  # twice what the disk holds: the oldest go
            assert client.write(sid, 0, list(range(TOKENS)), KV, BPT, "m", payload).durable
        stats = core.stats()
        assert stats["ssd_evictions"] >= 4 and stats["ssd_write_failures"] == 0
        kept = [sid for sid in data if client.lookup(sid).tier != common_pb2.TIER_NONE]
        assert "s7" in kept and len(kept) <= 4
        for sid in kept:
            assert client.read(sid).data == data[sid]
        # Lease everything stored, and each new session: once nothing can go, the write is
        # refused, clearly.
        leases = [client.lookup(sid, lease=True).lease_id for sid in kept]
        with pytest.raises(grpc.RpcError) as err:
            for i in range(8):
                client.write(f"x{i}", 0, list(range(TOKENS)), KV, BPT, "m",
                             os.urandom(BPT * TOKENS))
                leases.append(client.lookup(f"x{i}", lease=True).lease_id)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "full" in err.value.details()
        assert client.lookup(f"x{i}").tier == common_pb2.TIER_NONE
        # ... and the store still serves reads and, once leases go, writes.
        for sid in kept:
            assert client.read(sid).data == data[sid]
        for lease in leases:
            client.release(lease)
        payload = os.urandom(BPT * TOKENS)
        client.write("new", 0, list(range(TOKENS)), KV, BPT, "m", payload)
        assert client.read("new").data == payload
    finally:
        server.stop(0)
        core.close()


def test_a_disk_that_stays_full_is_one_warning_not_one_per_write(small_disk, caplog):
    """--ssd-bytes larger than the disk: every write past the disk's size is refused once and
    written after evicting. That was a WARNING per write (per turn, for as long as it lasts);
    now the first, then one every few minutes counting the others."""
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(small_disk),
                                     dram_bytes=0, ssd_bytes=1 << 30))
    client = KVClient(f"127.0.0.1:{server.port}")
    caplog.set_level("WARNING", logger="bidaw.kv_store")
    try:
        for i in range(16):  # four times what the disk holds
            assert client.write(f"s{i}", 0, list(range(TOKENS)), KV, BPT, "m",
                                os.urandom(BPT * TOKENS)).durable
        assert core.stats()["ssd_evictions"] >= 10
        full = [r for r in caplog.records if "disk full" in r.getMessage()]
        assert len(full) == 1, [r.getMessage() for r in full]
        # Minutes later, still full: one reminder counting the writes refused meanwhile.
        core.reads.parts.persister._disk_full_said._last -= 301
        for i in range(4):
            client.write(f"late{i}", 0, list(range(TOKENS)), KV, BPT, "m",
                         os.urandom(BPT * TOKENS))
        full = [r.getMessage() for r in caplog.records if "disk full" in r.getMessage()]
        assert len(full) == 2 and "more like it since" in full[1], full
    finally:
        server.stop(0)
        core.close()


def test_kv_larger_than_the_ssd_tier_is_refused_saying_so(tmp_path):
    """`--ssd-bytes` below a session's KV (0, or a typo): every write of it was refused as "SSD
    tier is full of KV in use (leased, loading or being written); retry later", logged by the
    worker on every turn, though nothing was in use and no retry could ever succeed."""
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "ssd"),
                                     dram_bytes=0, ssd_bytes=BPT * TOKENS // 2))
    client = KVClient(f"127.0.0.1:{server.port}")
    try:
        client.write("small", 0, [1], KV, BPT, "m", os.urandom(BPT))  # what fits is stored
        with pytest.raises(grpc.RpcError) as err:
            client.write("big", 0, list(range(TOKENS)), KV, BPT, "m", os.urandom(BPT * TOKENS))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than the SSD tier" in err.value.details()
        assert "--ssd-bytes" in err.value.details() and "retry" not in err.value.details()
        assert client.lookup("small").tier != common_pb2.TIER_NONE  # nothing evicted for it
    finally:
        server.stop(0)
        core.close()


def test_an_ssd_tier_larger_than_its_disk_is_warned_about_at_start(tmp_path, caplog):
    """`--ssd-bytes` past what the filesystem can hold: said at start (as a DRAM tier larger
    than /dev/shm is), not found out write by write as a full disk."""
    free = shutil.disk_usage(tmp_path).free
    for ssd_bytes, warned in ((free * 4, True), (1 << 20, False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="bidaw.kv_store"):
            server, core = start(StoreConfig(listen="127.0.0.1:0", dram_bytes=0,
                                             data_dir=str(tmp_path / str(ssd_bytes)),
                                             ssd_bytes=ssd_bytes))
            server.stop(0)
            core.close()
        said = [r.getMessage() for r in caplog.records if "--ssd-bytes" in r.getMessage()]
        assert bool(said) == warned, said
