"""One store per data directory with the embedded index: a second `bidaw serve store` on it is
refused at start, naming the directory and the holder's pid (both were accepted, and overwrote
each other's files). The lock goes with the holder however it ends: after a kill -9, a store
starts on the directory at once and serves what was written. Replicas over one directory with
the shared Redis index are intended, and take no lock.

Real store processes, real files; the in-process part starts stores as the tests' fixture does."""
from __future__ import annotations

import os
import stat

import grpc
import pytest

from kv_store.errors import StoreError
from kv_store.tiers.dir_lock import LOCK_NAME
from services.runtime.gen import common_pb2
from compute_worker.kv_client import KVClient
from tests.cluster import ServiceProcess
from tests.redis_server import redis_url  # noqa: F401 (a fixture)
from tests.store_helpers import BPT, Stores, token_bytes

KV = common_pb2.KV_FORMAT_KV


def _store(tmp_path, data_dir, shm_dir) -> ServiceProcess:
    shm_dir.mkdir(exist_ok=True)
    return ServiceProcess("store", tmp_path, "--data-dir", str(data_dir), "--shm-dir",
                          str(shm_dir), "--dram-bytes", "4MiB", "--eviction", "lru")


def test_a_second_store_on_the_directory_is_refused_and_a_kill_9_frees_it(tmp_path):
    data = tmp_path / "ssd"
    first = _store(tmp_path, data, tmp_path / "shm-1").wait()
    tokens = list(range(10, 20))
    second = None
    try:
        client = KVClient(first.target, timeout=30)
        client.write("s", 0, tokens, KV, BPT, "m", token_bytes("s", tokens))

        second = _store(tmp_path, data, tmp_path / "shm-2")
        assert second.proc.wait(30) == 1  # it started, and served beside the first
        said = second.log().strip().splitlines()
        assert said[-1] == (f"bidaw serve store: --data-dir {data} is in use by another store "
                            f"(pid {first.proc.pid}); stop it, or give this one its own "
                            "--data-dir (replicas that share a directory need the shared "
                            "index, --index redis://...)"), said
        assert not any((tmp_path / "shm-2").iterdir())  # refused before it made its DRAM arena
        assert stat.S_IMODE(os.stat(data / LOCK_NAME).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
        assert first.proc.poll() is None  # the first serves on, its KV untouched
        assert client.read("s").data == token_bytes("s", tokens)
        client.close()

        first.proc.kill()  # kill -9: no clean-up; the kernel drops the lock
        first.proc.wait(30)
        third = _store(tmp_path, data, tmp_path / "shm-3").wait(60)
        client = KVClient(third.target, timeout=30)
        try:
            got = client.read("s")
            assert got.token_ids == tokens and got.data == token_bytes("s", tokens)
        finally:
            client.close()
            third.stop()
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_in_one_process_the_lock_is_held_until_the_store_closes(tmp_path):
    stores = Stores(tmp_path / "ssd", eviction="lru", shm_dir=str(tmp_path))
    try:
        _, first = stores()
        with pytest.raises(StoreError) as err:
            stores()
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert f"--data-dir {tmp_path / 'ssd'} is in use by another store (pid {os.getpid()})" \
            in err.value.message
        stores.stop(first)
        client, _ = stores()  # closed, it let go
        client.write("s", 0, [1, 2], KV, BPT, "m", token_bytes("s", [1, 2]))
    finally:
        stores.close()


def test_replicas_with_the_shared_index_share_a_directory(tmp_path, redis_url):  # noqa: F811
    stores = Stores(tmp_path / "ssd", eviction="lru", shm_dir=str(tmp_path), index=redis_url)
    try:
        a, _ = stores()
        b, _ = stores()  # accepted: the Redis index serialises their appends
        a.write("s", 0, [1, 2, 3], KV, BPT, "m", token_bytes("s", [1, 2, 3]))
        got = b.read("s")
        assert got.token_ids == [1, 2, 3] and got.data == token_bytes("s", [1, 2, 3])
        assert not (tmp_path / "ssd" / LOCK_NAME).exists()
    finally:
        stores.close()
