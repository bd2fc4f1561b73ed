"""The index of what the SSD tier durably holds: per session, its tokens, format, the committed
length of its file and a version that changes with every committed write.

Only durable state goes in: an entry is written after the record it describes is fsync'd, and a
write that was not acknowledged is past the committed length, so the next write overwrites it.
Two kinds behind this interface: embedded (embedded.py: rebuilt from the files at start-up, this
process only) and Redis (redis_catalog.py, `--index redis://host:port/db`: shared by store
replicas over one data directory and kept across restarts); factory.py picks one.
"""
from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from kv_store.session_meta import SessionMeta
from kv_store.tiers.ssd import SsdTier


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
