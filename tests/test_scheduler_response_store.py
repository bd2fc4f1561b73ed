"""The Responses API's stored responses: per tenant, bounded by bytes (least recently used
first) and idle time, and chains read back by their links."""
from __future__ import annotations

import pytest

from scheduler.response_store import MissingResponse, ResponseStore, StoredResponse


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(rid: str, tenant: str = "alice", previous: str | None = None,
           text: str = "hi") -> StoredResponse:
    return StoredResponse(rid, tenant, previous, ("user", text), len(text.encode()) + 100)


def test_a_chain_is_read_back_oldest_first_within_its_tenant():
    store = ResponseStore(1 << 20, 60)
    for rid, prev in (("r1", None), ("r2", "r1"), ("r3", "r2")):
        store.put(record(rid, previous=prev))
    assert [r.id for r in store.chain("alice", "r3")] == ["r1", "r2", "r3"]
    # another tenant's id is the same miss as an unknown one
    assert store.get("bob", "r1") is None
    with pytest.raises(MissingResponse) as miss:
        store.chain("bob", "r3")
    assert miss.value.response_id == "r3"
    # a deleted link breaks the chain, naming it
    assert store.delete("alice", "r2") and not store.delete("alice", "r2")
    with pytest.raises(MissingResponse) as miss:
        store.chain("alice", "r3")
    assert miss.value.response_id == "r2"


def test_bytes_bound_drops_the_least_recently_used_first():
    size = record("x").size
    store = ResponseStore(3 * size, 60)
    for rid in ("a", "b", "c"):
        store.put(record(rid))
    store.get("alice", "a")  # read: now the most recently used
    store.put(record("d"))
    assert store.get("alice", "b") is None
    assert all(store.get("alice", rid) for rid in ("a", "c", "d"))
    assert store.bytes == 3 * size
    # one larger than the whole store is never kept, and evicts nothing
    store.put(record("big", text="x" * (4 * size)))
    assert store.get("alice", "big") is None and store.bytes == 3 * size


def test_an_idle_response_expires_and_a_read_keeps_it():
    clock = Clock()
    store = ResponseStore(1 << 20, 60, clock)
    store.put(record("a"))
    store.put(record("b"))
    clock.now = 50
    assert store.get("alice", "a") is not None
    clock.now = 100  # a read 50 s ago, b untouched for 100 s
    assert store.get("alice", "a") is not None and store.get("alice", "b") is None
    assert store.bytes == record("a").size


def test_a_cycle_of_links_is_a_miss_not_a_hang():
    store = ResponseStore(1 << 20, 60)
    store.put(record("a", previous="b"))
    store.put(record("b", previous="a"))
    with pytest.raises(MissingResponse):
        store.chain("alice", "a")


def test_a_tenant_storing_without_end_evicts_its_own_not_the_others():
    size = record("a00").size  # (ids of one length: records of one size)
    store = ResponseStore(10 * size, 60)
    store.put(record("b00", tenant="bob"))
    store.put(record("c00", tenant="carol"))
    for i in range(50):  # alice floods: 50 records into a store of 10
        store.put(record(f"a{i:02d}"))
    assert store.get("bob", "b00") and store.get("carol", "c00")
    assert store.held["alice"] == 8 * size and store.bytes == 10 * size
    assert store.get("alice", "a49") and store.get("alice", "a41") is None
    # a newcomer past the bound takes its room from the largest (alice), not from bob
    store.put(record("d00", tenant="dan"))
    assert store.get("bob", "b00") and store.held["alice"] == 7 * size
    store.delete("dan", "d00")
    assert "dan" not in store.held and store.bytes == 9 * size


PROBE = """
import gc, sys
from services.gateway.config import GatewayConfig
from services.gateway.response_objects import ResponseReply, input_items
from services.gateway.responses_input import parse_response_request, stored, with_history
from services.runtime.gen import common_pb2, scheduler_pb2
from scheduler.response_store import ResponseStore, StoredResponse

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

config = GatewayConfig(listen="127.0.0.1:0", scheduler="127.0.0.1:1")
summary = common_pb2.TurnSummary(finish_reason="stop", prompt_tokens=30, completion_tokens=1)
text, meta = sys.argv[1] * int(sys.argv[2]), {f"k{j}": "v" * 500 for j in range(int(sys.argv[3]))}
store = ResponseStore(1 << 40, 60)
gc.collect()
before = rss()
for i in range(20000):
    ask = parse_response_request({"model": "m", "input": f"{text} {i}", "metadata": meta},
                                 config, "alice")
    with_history(ask, None, config)
    reply = ResponseReply(ask, "m", 1.0, 1.0)
    sent = stored(ask, reply.id, f"ok {i}", reply.response(f"ok {i}", summary), input_items(ask))
    got = scheduler_pb2.StoredResponse.FromString(sent.SerializeToString())  # as the wire gives it
    store.put(StoredResponse(got.id, got.tenant, None, got, got.ByteSize()))
gc.collect()
print(rss() - before, store.bytes)
"""


@pytest.mark.parametrize("text, repeat, metadata", [("x", 1, 0), ("y", 1000, 0),
                                                    ("\u00e9", 1000, 0), ("x", 1, 16)])
def test_the_bytes_counted_cover_what_the_records_hold(text, repeat, metadata):
    """20,000 records as the gateway sends them (the request parsed, the response object, the
    input items) and the scheduler keeps them, in a fresh process: its RSS grows by at most
    the bytes counted against --responses-store-bytes (upb's messages live outside Python's
    allocator, so tracemalloc would not see them)."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", PROBE, text, str(repeat), str(metadata)],
                         cwd=root, capture_output=True, text=True, timeout=120, check=True)
    grown, counted = map(int, out.stdout.split())
    assert 0 < grown <= counted, (grown / 20000, counted / 20000)
