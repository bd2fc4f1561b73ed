"""Making a kept index (Redis) and the SSD files agree, at start-up and after the index was lost."""
from __future__ import annotations

import logging
import os

from kv_store.catalog.base import Catalog, CatalogEntry
from kv_store.tiers.ssd import SsdTier

log = logging.getLogger("bidaw.kv_store")


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
