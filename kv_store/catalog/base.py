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
import logging
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from kv_store.session_meta import SessionMeta
from kv_store.tiers.ssd import SsdTier

log = logging.getLogger("bidaw.kv_store")


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


def reconcile(catalog: Catalog, ssd: SsdTier, entries: list[CatalogEntry],
              live: bool = False) -> list[CatalogEntry]:
    """Make a kept index (Redis) and the files agree; the entries that stand. At start-up, or
    `live` while the store serves (its own lengths of the files it knows are then kept).

    An entry whose file is gone is dropped (a miss, not an error at the first read). A file with
    no entry (the index lost it: Redis restarted without persistence) is adopted if its records
    check out, else removed: nothing on disk is left that nobody can find. Both under the
    session's lock: another replica may be writing the session right now.
    """
    kept = []
    for entry in entries:
        sid = entry.meta.session_id
        if not ssd.path(sid).exists():
            with catalog.lock(sid):
                if not ssd.path(sid).exists():
                    catalog.delete(sid)
                    log.warning("index entry of %r has no file: dropped", sid)
                    continue
        if not live:
            ssd.set_length(sid, entry.ssd_len)
        kept.append(entry)
    known = {ssd.path(e.meta.session_id) for e in kept}
    adopted = removed = 0
    for path in sorted((ssd.root / "sessions").glob("*/*.kv")):
        if path in known:
            continue
        try:
            found, end = ssd.scan_file(path)
        except OSError:
            continue  # removed meanwhile
        sid = found.meta.session_id if found.meta is not None else None
        with catalog.lock(sid or path.name):
            if sid is not None and catalog.get(sid) is not None:
                continue  # another replica just wrote it
            if sid is None:
                path.unlink(missing_ok=True)
                removed += 1
                continue
            if end < path.stat().st_size:
                os.truncate(path, end)  # a torn tail was never acknowledged
            entry = CatalogEntry(found.meta, end, 1)
            catalog.put(entry)
            ssd.set_length(sid, end)
            kept.append(entry)
            adopted += 1
    if adopted or removed:
        log.warning("files missing from the index: %d adopted, %d unreadable removed", adopted,
                    removed)
    return kept


def make_catalog(spec: str, namespace: str = "bidaw") -> Catalog:
    """`embedded` or `redis://host:port/db`."""
    if not spec or spec == "embedded":
        return EmbeddedCatalog()
    if spec.startswith(("redis://", "rediss://", "unix://")):
        from kv_store.catalog.redis_catalog import RedisCatalog

        return RedisCatalog(spec, namespace)
    raise ValueError(f"--index: {spec!r} is neither 'embedded' nor a redis:// URL")
