"""The index of what the SSD tier durably holds: per session, its tokens, format, the committed
length of its file and a version that changes with every committed write.

Only durable state goes in: an entry is written after the record it describes is fsync'd, and a
write that was not acknowledged is past the committed length, so the next write overwrites it.
Two kinds behind one interface: embedded (rebuilt from the files at start-up, this process only)
and Redis (`--index redis://host:port/db`, shared by store replicas over one data directory and
kept across restarts).
"""
from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from .session_meta import SessionMeta
from .ssd_tier import SsdTier


@dataclass
class CatalogEntry:
    meta: SessionMeta
    ssd_len: int  # bytes of the session file that are committed
    version: int  # changes with every committed write (replicas compare it)


class Catalog(ABC):
    kind = "base"

    @abstractmethod
    def load(self, ssd: SsdTier) -> list[CatalogEntry]:
        """Every entry, at start-up; tells `ssd` the committed length of each file."""

    @abstractmethod
    def get(self, session_id: str) -> CatalogEntry | None:
        """The entry as committed now (another replica may have changed it)."""

    @abstractmethod
    def put(self, entry: CatalogEntry) -> None:
        """Publish a committed write."""

    @abstractmethod
    def delete(self, session_id: str) -> None:
        """The session's file is gone."""

    def version(self, session_id: str) -> int | None:
        entry = self.get(session_id)
        return None if entry is None else entry.version

    @contextlib.contextmanager
    def lock(self, session_id: str) -> Iterator[None]:
        """Excludes other writers of the session (other replicas, for shared kinds)."""
        yield

    def close(self) -> None:
        pass


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


def make_catalog(spec: str, namespace: str = "bidaw") -> Catalog:
    """`embedded` or `redis://host:port/db`."""
    if not spec or spec == "embedded":
        return EmbeddedCatalog()
    if spec.startswith(("redis://", "rediss://", "unix://")):
        from .redis_catalog import RedisCatalog

        return RedisCatalog(spec, namespace)
    raise ValueError(f"--index: {spec!r} is neither 'embedded' nor a redis:// URL")
