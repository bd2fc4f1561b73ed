"""The responses the Responses API stored (`store`, on by default), so that a client may send
only its new input with `previous_response_id`, and read (GET) or delete them later.

In this gateway's memory, per tenant: another tenant's id is the same miss as an unknown one.
Bounded by bytes and by idle time, since they hold the conversations' text; past the bytes, the
tenant holding the most gives up its least recently used first, so that a tenant storing without
end evicts its own, not the others' (before, one evicted every other tenant's). A restarted or
another gateway replica does not know them (the client then gets a 404 and may send its whole
history, whose KV the scheduler still recognises). A response keeps only its own input and answer
and the id it followed: a chain is read back by walking those links, so a long conversation is
stored once, not once per turn.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field

# bytes counted per record beyond its texts: the response object's dicts and lists, the input
# items', ids and headers (tracemalloc: 4.3 KB for a one-word exchange, which 512 made 1.7 KB,
# so that a store of 256 MiB of such ones held 640 MiB)
OVERHEAD = 3584


@dataclass
class StoredResponse:
    id: str
    tenant: str
    previous_id: str | None
    messages: list[tuple[str, str]]  # its own input, as (role, content); no instructions
    output: str  # the assistant's answer
    body: dict  # the response object, as GET returns it
    input_items: list[dict] = field(default_factory=list)
    size: int = 0

    def __post_init__(self):
        self.size = (OVERHEAD + sum(len(c.encode()) for _, c in self.messages)
                     + len(json.dumps(self.body)) + len(json.dumps(self.input_items)))


class MissingResponse(LookupError):
    """A response of the chain is unknown (never stored, deleted, expired or another tenant's)."""

    def __init__(self, response_id: str):
        super().__init__(response_id)
        self.response_id = response_id


class ResponseStore:
    def __init__(self, max_bytes: int, ttl_s: float, clock=time.monotonic):
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.clock = clock
        self.bytes = 0
        # per tenant, least recently used first: id -> (record, last used)
        self._items: dict[str, OrderedDict[str, tuple[StoredResponse, float]]] = {}
        self.held: dict[str, int] = {}  # bytes per tenant

    def put(self, record: StoredResponse) -> None:
        if record.size > self.max_bytes:
            return  # larger than the whole store: never kept (GET answers 404)
        self._drop(record.tenant, record.id)
        self._items.setdefault(record.tenant, OrderedDict())[record.id] = (record, self.clock())
        self.held[record.tenant] = self.held.get(record.tenant, 0) + record.size
        self.bytes += record.size
        while self.bytes > self.max_bytes:
            largest = max(self.held, key=self.held.__getitem__)
            self._drop(largest, next(iter(self._items[largest])))

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
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
        return record

    def delete(self, tenant: str, response_id: str) -> bool:
        return self.get(tenant, response_id) is not None and self._drop(tenant, response_id)

    def chain(self, tenant: str, response_id: str) -> list[StoredResponse]:
        """The conversation that ends with `response_id`, oldest response first."""
        out, seen, at = [], set(), response_id
        while at is not None:
            record = self.get(tenant, at) if at not in seen else None
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
