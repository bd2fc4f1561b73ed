"""Which loads waiting for DRAM room get it first (pure: the clock and arrivals are passed in).

The demand loads (a queued turn's) go first, in disk-HRRN order as the scheduler ranks loads:
the longest wait since the turn arrived per byte of KV, so a small KV goes before a large one
that has not waited much longer. The prepared loads (a client's prepare) go after them, oldest
first. kv_store/promotions.py asks for them again in this order, as many as the room holds."""
from __future__ import annotations

from typing import Callable


def room_order(parked: list[tuple], arrived_at: Callable[[str], float | None],
               now: float) -> list[tuple]:
    """`parked`, entries (session id, bytes, prepared, ...), as the room should go to them;
    `arrived_at(session)`: when its turn arrived (None: no turn queued, ranked last among the
    demand loads)."""
    def rank(entry: tuple) -> tuple[bool, float]:
        session_id, nbytes, prepared = entry[:3]
        arrived = None if prepared else arrived_at(session_id)
        return prepared, 0.0 if arrived is None else -(now - arrived) / max(nbytes, 1)
    return sorted(parked, key=rank)
