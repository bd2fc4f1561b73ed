"""glibc malloc settings for processes that allocate large buffers of varied sizes from many
threads (KV tensors and their bytes, in the engine actor and the KV store).

By default glibc raises its mmap threshold to the size of the largest mmapped chunk freed so
far (up to 32 MiB), after which KV-sized buffers come from the heap arenas, one per thread up to
8 per core; holes freed between live chunks there are kept, not returned to the OS, so RSS
creeps up with the mix of sizes. Measured with `bidaw load` (200 sessions, 6.7 min): the
engine actor grew 375 MB after warm-up without these settings and 88 MB with them (while later
turns' longer prompts entered the mix), at the same throughput. A fixed threshold (which also
turns the dynamic one off) sends every buffer of 1 MiB or more to mmap, unmapped on free; two
arenas bound what the threads can hold between them.
"""
from __future__ import annotations

import ctypes
import os

M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
M_ARENA_MAX = -8
MMAP_THRESHOLD = 1 << 20
ARENA_MAX = 2


def tune() -> bool:
    """Apply the settings to this process unless the environment sets them already
    (MALLOC_MMAP_THRESHOLD_, MALLOC_ARENA_MAX: the operator's choice wins). False where the C
    library is not glibc."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    ok = True
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok &= mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok &= mallopt(M_ARENA_MAX, ARENA_MAX) == 1
    return bool(ok)
