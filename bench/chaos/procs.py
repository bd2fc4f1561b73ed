"""Finding processes for fault injection (chaos runs and tests), from /proc: no extra dependency."""
from __future__ import annotations

import os
import pathlib


def _ppid(pid: int) -> int | None:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> list[int]:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    parent = {pid: _ppid(pid) for pid in pids}
    found, frontier = [], {root}
    while frontier:
        children = [p for p, pp in parent.items() if pp in frontier and p not in found]
        found += children
        frontier = set(children)
    return found


def find_descendant(root: int, needle: str) -> int | None:
    """A descendant of `root` whose command line contains `needle`."""
    for pid in descendants(root):
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if needle.encode() in cmdline:
            return pid
    return None
