"""Bounds of the wire that every service checks the same way."""
from __future__ import annotations

# A session id, in UTF-8 bytes. The gateway's --max-session-id may be lower, never higher: the
# services behind it refuse longer ones.
MAX_SESSION_ID_BYTES = 256

# Integers a caller sends are 64-bit on the wire (protos/bidaw/v1); these are the ranges the
# services accept: token ids are int32 in every tier's records, counts of tokens uint32.
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


def first_outside(values, low: int, high: int) -> int | None:
    """The first of `values` outside [low, high], or None (min/max first: the usual case, all
    inside, costs two C passes over a long prompt)."""
    if not values or (min(values) >= low and max(values) <= high):
        return None
    return next(v for v in values if not low <= v <= high)
