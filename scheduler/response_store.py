"""The Responses API's stored responses (the gateway's POST /v1/responses with `store`, on by
default), so that a client may send only its new input with `previous_response_id`, and read
(GET) or delete them later. Kept by the scheduler, one place for every gateway replica: a
conversation one replica answered, any continues (kept by each gateway, a client behind a load
balancer got a 404 from every other replica).

In memory, per tenant: another tenant's id is the same miss as an unknown one. Bounded by bytes
and by idle time, since they hold the conversations' text; past the bytes, the tenant holding
the most gives up its least recently used first, so that a tenant storing without end evicts its
own, not the others'. With `--state-dir` a journal (response_journal.py) keeps them across a
restart; without one a restarted scheduler does not know them (the client then gets a 404 and
may send its whole history, whose KV the scheduler still recognises). A response keeps only its
own input and answer and the id it followed: a chain is read back by walking those links, so a
long conversation is stored once, not once per turn. Pure (the payload is opaque here) and
thread-safe: the scheduler's gRPC threads share it.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

# bytes counted per record: twice its serialized size (the message's arena and the heap around
# it), plus the record, the message object and the index entries. Measured (a fresh process,
# 20,000 records as they come off the wire; tests/test_scheduler_response_store.py): the RSS grew
# by 2.7 KB for a one-word exchange of 1.2 KB serialized, 9.2 KB for 1,000 accented characters
# of 4.2 KB; counted as the serialized bytes plus 2 KB, the latter made 7.2 KB.
OVERHEAD = 2048


@dataclass
class StoredResponse:
    id: str
    tenant: str
    previous_id: str | None
    payload: object  # what the gateway stored (scheduler_pb2.StoredResponse)
    size: int  # the payload's serialized bytes, then what the record is counted for
    noted: float = 0.0  # when the journal last wrote it down as used (wall clock)

    def __post_init__(self):
        self.size = 2 * self.size + OVERHEAD


class MissingResponse(LookupError):
    """A response of the chain is unknown (never stored, deleted, expired or another tenant's)."""

    def __init__(self, response_id: str):
        super().__init__(response_id)
        self.response_id = response_id


class ResponseStore:
    def __init__(self, max_bytes: int, ttl_s: float, clock=time.monotonic, on_use=None):
        """`on_use(record)`: called when a read makes a record the most recently used (under
        the store's lock), so that a journal may write the new idle time down."""
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.clock = clock
        self.on_use = on_use
        self.bytes = 0
        # per tenant, least recently used first: id -> (record, last used)
        self._items: dict[str, OrderedDict[str, tuple[StoredResponse, float]]] = {}
        self.held: dict[str, int] = {}  # bytes per tenant
        self._lock = threading.RLock()

    def put(self, record: StoredResponse) -> bool:
        """Whether it is kept: one larger than the whole store never is (GET answers 404)."""
        with self._lock:
            return self._put(record, self.clock())

    def restore(self, record: StoredResponse, used: float) -> bool:
        """A record read back from a journal, last used at `used` (this store's clock)."""
        with self._lock:
            return self._put(record, used)

    def restore_use(self, tenant: str, response_id: str, used: float) -> None:
        """A journal's note that a record was read at `used`: it becomes the most recent."""
        with self._lock:
            held = self._items.get(tenant, {}).get(response_id)
            if held is not None:
                self._items[tenant][response_id] = (held[0], used)
                self._items[tenant].move_to_end(response_id)

    def records(self) -> list[tuple[StoredResponse, float]]:
        """Every live record with its last use, each tenant's least recently used first."""
        with self._lock:
            now = self.clock()
            return [held for items in self._items.values() for held in items.values()
                    if now - held[1] <= self.ttl_s]

    def expire(self) -> int:
        """Drop every record idle past the TTL (a read drops one it finds so); returns how many."""
        with self._lock:
            now = self.clock()
            idle = [(tenant, rid) for tenant, items in self._items.items()
                    for rid, (_, used) in items.items() if now - used > self.ttl_s]
            for tenant, rid in idle:
                self._drop(tenant, rid)
            return len(idle)

    def _put(self, record: StoredResponse, used: float) -> bool:
        if record.size > self.max_bytes:
            return False
        self._drop(record.tenant, record.id)
        self._items.setdefault(record.tenant, OrderedDict())[record.id] = (record, used)
        self.held[record.tenant] = self.held.get(record.tenant, 0) + record.size
        self.bytes += record.size
        while self.bytes > self.max_bytes:
            largest = max(self.held, key=self.held.__getitem__)
            self._drop(largest, next(iter(self._items[largest])))
        return True

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._get(tenant, response_id)

    def _get(self, tenant: str, response_id: str) -> StoredResponse | None:
        held = self._items.get(tenant, {}).get(response_id)
        if held is None:
            return None
        record, used = held
        now = self.clock()
        if now - used > self.ttl_s:
            self._drop(tenant, response_id)
            return None
        self._items[tenant][response_id] = (record, now)  # read: most recently used
        self._items[tenant].move_to_end(response_id)
        if self.on_use is not None:
            self.on_use(record)
        return record

    def delete(self, tenant: str, response_id: str) -> bool:
        with self._lock:
            return self._get(tenant, response_id) is not None and self._drop(tenant, response_id)

    def chain(self, tenant: str, response_id: str) -> list[StoredResponse]:
        """The conversation that ends with `response_id`, oldest response first."""
        out, seen, at = [], set(), response_id
        while at is not None:
            with self._lock:
                record = self._get(tenant, at) if at not in seen else None
            if record is None:
                raise MissingResponse(at)
            seen.add(at)
            out.append(record)
            at = record.previous_id
        out.reverse()
        return out

    def _drop(self, tenant: str, response_id: str) -> bool:
        items = self._items.get(tenant, {})
        held = items.pop(response_id, None)
        if held is None:
            return False
        self.bytes -= held[0].size
        self.held[tenant] -= held[0].size
        if not items:  # a tenant with none left is forgotten
            del self._items[tenant], self.held[tenant]
        return True
