"""The embedded catalog: rebuilt from the SSD files at start-up, in this process only."""
from __future__ import annotations

import threading

from kv_store.catalog.base import Catalog, CatalogEntry
from kv_store.tiers.ssd import SsdTier


class EmbeddedCatalog(Catalog):
    kind = "embedded"

    def __init__(self):
        self._entries: dict[str, CatalogEntry] = {}
        self._lock = threading.Lock()

    def load(self, ssd: SsdTier) -> list[CatalogEntry]:
        with self._lock:
            for log, length in ssd.scan():
                self._entries[log.meta.session_id] = CatalogEntry(log.meta, length, 1)
            return list(self._entries.values())

    def get(self, session_id: str) -> CatalogEntry | None:
        with self._lock:
            return self._entries.get(session_id)

    def put(self, entry: CatalogEntry) -> None:
        with self._lock:
            self._entries[entry.meta.session_id] = entry

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._entries.pop(session_id, None)
