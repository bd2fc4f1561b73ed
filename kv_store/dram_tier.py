"""The DRAM (performance) tier: session KV bytes in host memory, bounded in bytes.

It only holds bytes and counts them; which entry to drop is the eviction policy's call and when
to drop is the store's. Inclusive with the SSD tier, so dropping never writes anything.
"""
from __future__ import annotations


class DramTier:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.used = 0
        self._data: dict[str, bytearray] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._data

    def __len__(self) -> int:
        return len(self._data)

    def size(self, session_id: str) -> int:
        data = self._data.get(session_id)
        return 0 if data is None else len(data)

    def get(self, session_id: str) -> memoryview | None:
        data = self._data.get(session_id)
        return None if data is None else memoryview(data)

    def put(self, session_id: str, data: bytes | bytearray) -> None:
        self.drop(session_id)
        self._data[session_id] = bytearray(data)
        self.used += len(data)

    def write_at(self, session_id: str, offset: int, data: bytes | memoryview) -> None:
        """Keep bytes [0, offset) of the entry and put `data` after them."""
        entry = self._data[session_id]
        self.used -= len(entry)
        del entry[offset:]
        entry += data
        self.used += len(entry)

    def drop(self, session_id: str) -> int:
        data = self._data.pop(session_id, None)
        if data is None:
            return 0
        self.used -= len(data)
        return len(data)

    def free(self) -> int:
        return self.capacity - self.used
