"""The store's prefix read (a load-or-recompute SPLIT loads the first k tokens and recomputes the
rest): over real gRPC and real files, a read of fewer tokens than the session holds reads only
the records holding them from the SSD, returns exactly their bytes, and leaves the session on
SSD; a whole read still brings it into DRAM."""
from __future__ import annotations

from services.runtime.gen import common_pb2
from tests.store_helpers import BPT, eventually, store, token_bytes  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
TURNS = [list(range(0, 30)), list(range(30, 50)), list(range(50, 90))]  # three appends


def _write_turns(client, session: str) -> list[int]:
    tokens: list[int] = []
    for turn in TURNS:
        client.write(session, len(tokens), turn, KV, BPT, "m", token_bytes(session, tokens + turn)
                     [len(tokens) * BPT:])
        tokens += turn
    return tokens


def test_a_prefix_read_reads_only_its_records_and_leaves_the_session_on_ssd(store):
    client, core = store(dram_bytes=256 * BPT)  # room for the whole session in DRAM
    tokens = _write_turns(client, "s")
    store.stop(core)
    client, core = store(dram_bytes=256 * BPT)  # restarted: the session is on SSD only
    assert client.lookup("s").tier == common_pb2.TIER_SSD
    whole = core.stats()["ssd_bytes"]
    for k, records in ((10, 1), (30, 1), (31, 2), (55, 3)):
        before = core.stats()["ssd_bytes_read"]
        got = client.read("s", max_tokens=k)
        assert got.token_ids == tokens[:k]
        assert got.data == token_bytes("s", tokens)[:k * BPT]
        read = core.stats()["ssd_bytes_read"] - before
        # the records up to the one holding token k - 1, each with its header
        assert sum(len(t) for t in TURNS[:records]) * BPT <= read <= whole
        if records < 3:
            assert read < sum(len(t) for t in TURNS[:records + 1]) * BPT
        assert client.lookup("s").tier == common_pb2.TIER_SSD  # not admitted
    # The client gives its shared-memory leases back without waiting (ReleaseLease.future): the
    # prefix reads' pages may still be held, and then the whole read finds no DRAM to enter.
    assert eventually(lambda: core.stats()["leases"] == 0)
    got = client.read("s")  # the whole session: read once and admitted, as before
    assert got.data == token_bytes("s", tokens) and got.token_ids == tokens
    assert client.lookup("s").tier == common_pb2.TIER_DRAM


def test_a_prefix_past_a_replaced_tail_reads_the_replacing_record(store):
    client, core = store(dram_bytes=0)
    client.write("d", 0, [1, 2, 3, 4], KV, 10, "m", b"a" * 40)
    client.write("d", 2, [7, 8, 9], KV, 10, "m", b"b" * 30)  # replaces tokens 2.. of the first
    client.write("d", 5, [5, 6], KV, 10, "m", b"c" * 20)
    for k, ids, data in ((2, [1, 2], b"a" * 20), (3, [1, 2, 7], b"a" * 20 + b"b" * 10),
                         (6, [1, 2, 7, 8, 9, 5], b"a" * 20 + b"b" * 30 + b"c" * 10)):
        got = client.read("d", max_tokens=k)
        assert (got.token_ids, got.data) == (ids, data)
