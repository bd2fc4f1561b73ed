"""An index entry in Redis that does not parse (a field missing or garbled, a key of another
type, a session id that is not UTF-8: another program's key, a version skew) stopped the store
at every start, so it never came back. Now it is dropped with a WARNING, and the session's file,
whose records describe themselves, is adopted again: nothing is lost. Real Redis, real files."""
from __future__ import annotations

import logging
import os

import grpc
import pytest
import redis

from services.runtime.gen import common_pb2
from tests.redis_server import redis_url  # noqa: F401 (a fixture)
from tests.store_helpers import Stores

KV = common_pb2.KV_FORMAT_KV
BPT = 4096
ENTRY = "bidaw:kv:s:s"


def damage(r: redis.Redis, how: str) -> None:
    if how == "tokens-odd-length":
        r.hset(ENTRY, "tokens", b"abc")
    elif how == "field-missing":
        r.hdel(ENTRY, "fmt")
    elif how == "field-not-a-number":
        r.hset(ENTRY, "len", "zz")
    elif how == "model-not-utf8":
        r.hset(ENTRY, "model", b"\xff")
    elif how == "key-of-another-type":
        r.delete(ENTRY)
        r.set(ENTRY, "x")


@pytest.mark.parametrize("how", ["tokens-odd-length", "field-missing", "field-not-a-number",
                                 "model-not-utf8", "key-of-another-type"])
def test_a_damaged_entry_is_dropped_and_its_file_adopted_again(tmp_path, redis_url, caplog,
                                                               how):
    stores = Stores(tmp_path / "ssd", dram_bytes=1 << 20, eviction="lru", index=redis_url)
    try:
        client, core = stores()
        first, other = os.urandom(3 * BPT), os.urandom(2 * BPT)
        client.write("s", 0, [1, 2, 3], KV, BPT, "m", first)
        client.write("t", 0, [7, 8], KV, BPT, "m", other)
        stores.stop(core)
        r = redis.Redis.from_url(redis_url)
        damage(r, how)
        r.sadd("bidaw:kv:sessions", b"\xff\xfe")  # and a member that is not UTF-8
        with caplog.at_level(logging.WARNING, logger="bidaw.kv_store"):
            client, core = stores()  # it raised here, at every start
        got = client.read("s")
        assert got.token_ids == [1, 2, 3] and got.data == first  # from its file, adopted
        assert client.read("t").data == other
        assert int(r.hget(ENTRY, "len")) > 0 and not r.sismember("bidaw:kv:sessions",
                                                                  b"\xff\xfe")
        said = " ".join(rec.getMessage() for rec in caplog.records)
        assert "index entry of 's' is damaged" in said and "not UTF-8" in said
    finally:
        stores.close()


def test_an_entry_damaged_while_serving_is_a_miss_not_an_error(tmp_path, redis_url):
    stores = Stores(tmp_path / "ssd", dram_bytes=1 << 20, eviction="lru", index=redis_url)
    try:
        a, _ = stores()
        b, _ = stores()  # a second replica: it knows the session from the index only
        a.write("s", 0, [1, 2], KV, BPT, "m", os.urandom(2 * BPT))
        assert b.lookup("s").tier == common_pb2.TIER_SSD
        damage(redis.Redis.from_url(redis_url), "key-of-another-type")
        with pytest.raises(grpc.RpcError) as err:  # an append to what is now unknown
            a.write("s", 2, [3], KV, BPT, "m", os.urandom(BPT))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "holds 0 tokens" in err.value.details()
        again = os.urandom(3 * BPT)
        a.write("s", 0, [1, 2, 3], KV, BPT, "m", again)  # the turn's whole KV: stored anew
        got = b.read("s")
        assert got.token_ids == [1, 2, 3] and got.data == again
    finally:
        stores.close()
