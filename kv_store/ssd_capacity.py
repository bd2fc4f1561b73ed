"""The SSD tier's capacity: `--ssd-bytes`, or, left at its default, what the disk has room for.

The default (64 GiB) suits a serving machine. On a smaller disk (a laptop, a CI box) every
write past the disk's room would meet a full disk (evict, retry), and each start would warn of
it: a tier left at the default takes 90% of the room instead (what its files hold plus the
disk's free space), and says so once at INFO. A size the operator chose is kept, and a WARNING
says when the disk cannot hold it."""
from __future__ import annotations

import logging
import os
import pathlib
import shutil

from kv_store.config import StoreConfig
from services.runtime.config import field_default

log = logging.getLogger("bidaw.kv_store")
DEFAULT_SSD_BYTES = field_default(StoreConfig, "ssd_bytes")
ROOM_SHARE = 0.9  # of the room, for a tier left at the default: the disk is not ours alone


def capacity(asked: int, room: int, default: int = DEFAULT_SSD_BYTES) -> int:
    """The tier's bytes: `asked`, or at the default, at most ROOM_SHARE of `room` (MiB)."""
    if asked != default or room >= asked:
        return asked
    return int(room * ROOM_SHARE) >> 20 << 20


def held_bytes(root: pathlib.Path) -> int:
    """Bytes of the tier's session files already on disk (a restart's)."""
    total = 0
    for directory, _, files in os.walk(root / "sessions"):
        for name in files:
            try:
                total += os.stat(os.path.join(directory, name)).st_size
            except FileNotFoundError:
                pass
    return total


def ssd_capacity(config: StoreConfig, root: pathlib.Path) -> int:
    """`capacity` for this store's disk, logged when it is not what --ssd-bytes says."""
    room = held_bytes(root) + shutil.disk_usage(root).free
    size = capacity(config.ssd_bytes, room)
    if size != config.ssd_bytes:
        log.info("SSD tier: %d bytes, 90%% of the %d the disk at %s has room for (the default "
                 "--ssd-bytes is %d; set it to choose)", size, room, root, config.ssd_bytes)
    elif room < size:  # each write past it would meet a full disk, evict, retry
        log.warning("%s can hold %d bytes of KV (free plus held), less than --ssd-bytes %d",
                    root, room, size)
    return size
