"""The Redis index with a real redis-server that goes away: calls answer UNAVAILABLE with a
message (never UNKNOWN), and a restart reconciles the files and the index both ways."""
from __future__ import annotations

import os
import time

import grpc
import pytest
import redis

from kv_store.tiers.ssd import SsdTier
from services.runtime.gen import common_pb2
from tests.redis_server import redis_url  # noqa: F401 (a fixture)
from tests.store_helpers import Stores

KV = common_pb2.KV_FORMAT_KV
BPT = 4096


@pytest.fixture
def store(tmp_path, redis_url):
    stores = Stores(tmp_path / "ssd", dram_bytes=1 << 20, eviction="lru", index=redis_url)
    yield stores
    stores.close()


def test_redis_down_gives_unavailable_not_unknown(store, redis_url):
    client, core = store()
    try:
        client.write("s", 0, [1, 2], KV, BPT, "m", os.urandom(2 * BPT))
        try:
            redis.Redis.from_url(redis_url).shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # it closed the connection on its way out
        for call in (lambda: client.lookup("other"),
                     lambda: client.write("t", 0, [1], KV, BPT, "m", os.urandom(BPT))):
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()
            assert "Redis" in err.value.details() and "unreachable" in err.value.details()
    finally:
        store.stop(core)


def test_restart_reconciles_files_and_index(store, tmp_path, redis_url):
    client, core = store()
    kept, gone = os.urandom(3 * BPT), os.urandom(BPT)
    client.write("kept", 0, [1, 2, 3], KV, BPT, "m", kept)
    client.write("gone", 0, [7], KV, BPT, "m", gone)
    store.stop(core)
    r = redis.Redis.from_url(redis_url)
    ssd = SsdTier(tmp_path / "ssd")
    ssd.path("gone").unlink()  # an index entry whose file is gone
    r.delete("bidaw:kv:s:kept")  # a file the index forgot (Redis restarted empty)
    r.srem("bidaw:kv:sessions", "kept")
    junk = ssd.path("junk")  # a file that is no session at all
    junk.parent.mkdir(parents=True, exist_ok=True)
    junk.write_bytes(b"not a record" * 100)
    ssd.close()

    client, core = store()
    try:
        assert not r.sismember("bidaw:kv:sessions", "gone")
        assert r.sismember("bidaw:kv:sessions", "kept")
        assert not junk.exists()
        got = client.read("kept")
        assert got.token_ids == [1, 2, 3] and got.data == kept
        assert core.ssd.used_bytes == os.path.getsize(core.ssd.path("kept"))
    finally:
        store.stop(core)


def test_store_without_its_redis_exits_with_one_line(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "serve", "store", "--listen",
                          "127.0.0.1:0", "--data-dir", str(tmp_path / "ssd"), "--shm-dir",
                          str(tmp_path), "--index", f"redis://127.0.0.1:{port}/0",
                          "--insecure-no-auth", "true"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert f"the session index (Redis at 127.0.0.1:{port}) is unreachable" in out.stderr


def _redis_on(port: int, workdir) -> "subprocess.Popen":
    import shutil
    import subprocess

    proc = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind",
                             "127.0.0.1", "--dir", str(workdir), "--save", "", "--appendonly",
                             "no"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            assert time.monotonic() < deadline and proc.poll() is None, "redis did not start"
            time.sleep(0.05)


def test_redis_restarted_empty_under_a_live_store_gets_its_index_back(store, tmp_path,
                                                                      redis_url):
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    client, core = store()
    core.catalog.epoch_check_s = 0.2
    data = os.urandom(2 * BPT)
    client.write("s", 0, [1, 2], KV, BPT, "m", data)
    r = redis.Redis.from_url(redis_url)
    again = None
    try:
        try:
            r.shutdown(nosave=True)  # Redis restarts without its data
        except redis.ConnectionError:
            pass
        again = _redis_on(port, tmp_path)
        assert not r.sismember("bidaw:kv:sessions", "s")
        core.catalog.reconciled.clear()
        deadline = time.monotonic() + 30
        while not core.catalog.reconciled.is_set():  # any call notices the lost index
            assert time.monotonic() < deadline, "no reconciliation"
            client.lookup("other")
            core.catalog.reconciled.wait(0.3)
        assert r.sismember("bidaw:kv:sessions", "s")  # the file is in the index again
        got = client.read("s")
        assert got.token_ids == [1, 2] and got.data == data
    finally:
        store.stop(core)
        if again is not None:
            again.terminate()
            again.wait()
