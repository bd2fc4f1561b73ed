"""A session file replaced, while the store runs, by another session's file (an operator's
restore or copy over the data directory, a second store writing the same directory): its records
check out, but they are the other session's. The read must be a miss, never the other session's
KV served under this session's name: the store once served it with the other's token ids, and
then, having put its bytes in DRAM under this name, with this session's own token ids (wrong KV,
and a worker would have reused it)."""
from __future__ import annotations

import shutil

import grpc
import pytest

from services.runtime.gen import common_pb2
from tests.store_helpers import BPT, Stores, store, token_bytes  # noqa: F401 (a fixture)

KV = common_pb2.KV_FORMAT_KV
STORE_DEFAULTS = dict(eviction="lru")


def test_a_file_holding_another_sessions_records_is_a_miss(store):
    client, core = store(dram_bytes=12 * BPT)  # DRAM holds one of the two sessions
    a, b = list(range(100, 110)), list(range(200, 210))  # same length: same file size
    client.write("a", 0, a, KV, BPT, "m", token_bytes("a", a))
    client.write("b", 0, b, KV, BPT, "m", token_bytes("b", b))  # "a" leaves DRAM for it
    assert client.lookup("a").tier == common_pb2.TIER_SSD
    shutil.copyfile(core.ssd.path("b"), core.ssd.path("a"))

    for _ in range(2):  # the second read would come from DRAM had the first admitted it
        with pytest.raises(grpc.RpcError) as err:
            got = client.read("a")
            pytest.fail(f"served {got.token_ids[:3]}... and "
                        f"{'b' if got.data == token_bytes('b', b) else 'other'}'s bytes as 'a'")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert client.lookup("a").tier == common_pb2.TIER_NONE
    assert core.stats()["corrupt_records"] == 1
    assert not core.ssd.path("a").exists()  # the misplaced copy is gone ...
    got = client.read("b")  # ... and the session it belongs to is untouched
    assert got.token_ids == b and got.data == token_bytes("b", b)

    client.write("a", 0, a, KV, BPT, "m", token_bytes("a", a))  # "a" is stored anew
    got = client.read("a")
    assert got.token_ids == a and got.data == token_bytes("a", a)


def test_a_misplaced_file_never_feeds_an_appended_turn(store):
    """The next turn of the session appends to what the store believes it holds: after the
    miss it starts over from token 0, so no later read mixes the other session's bytes in."""
    client, core = store(dram_bytes=0)  # every read from SSD
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    client.write("a", 0, a, KV, BPT, "m", token_bytes("a", a))
    client.write("b", 0, b, KV, BPT, "m", token_bytes("b", b))
    shutil.copyfile(core.ssd.path("b"), core.ssd.path("a"))
    with pytest.raises(grpc.RpcError):
        client.read("a")
    with pytest.raises(grpc.RpcError) as err:  # an append to what is gone is refused
        client.write("a", 4, [9], KV, BPT, "m", token_bytes("a", a + [9])[4 * BPT:])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # "leaves a gap": 0 held
    client.write("a", 0, a + [9], KV, BPT, "m", token_bytes("a", a + [9]))
    got = client.read("a")
    assert got.token_ids == a + [9] and got.data == token_bytes("a", a + [9])


def test_a_session_rewritten_by_a_second_store_is_never_served_with_the_wrong_tokens(store,
                                                                                     tmp_path):
    """Another store's file of the same session copied over this store's (a restore, an
    operator's copy; two stores with the embedded index over one data directory did it too
    before the directory lock refused the second, tests/test_store_dir_lock.py). The first
    served the new file's bytes with their own token ids (KV that matches its tokens), but kept
    them in DRAM, from where they were served with the token ids it had indexed: wrong KV.
    Every read must give KV that matches its token ids."""
    first, core = store(dram_bytes=12 * BPT)
    elsewhere = Stores(tmp_path / "elsewhere", eviction="lru")
    try:
        second, other = elsewhere(dram_bytes=12 * BPT)
        mine, theirs = list(range(100, 110)), list(range(200, 210))
        first.write("s", 0, mine, KV, BPT, "m", token_bytes("s", mine))
        first.write("t", 0, theirs, KV, BPT, "m", token_bytes("t", theirs))  # "s" leaves DRAM
        second.write("s", 0, theirs, KV, BPT, "m", token_bytes("s", theirs))
        shutil.copyfile(other.ssd.path("s"), core.ssd.path("s"))  # over its file
    finally:
        elsewhere.close()
    for _ in range(3):
        got = first.read("s")
        assert got.data == token_bytes("s", got.token_ids), \
            f"tokens {got.token_ids[:2]}... served with the bytes of other tokens"
    assert first.read("t").data == token_bytes("t", theirs)  # the rest is served as before
