"""Format dispatch: `load_trace(path, "bidaw" | "mooncake" | "sharegpt" | "auto")`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.traces.turn import TraceError, Turn

FORMATS = ("auto", "bidaw", "mooncake", "sharegpt")


def detect_format(path: str | Path) -> str:
    p = str(path)
    if p.endswith(".jsonl"):
        return "mooncake"
    if p.endswith(".json"):
        return "sharegpt"
    return "bidaw"


def load_trace(path: str | Path, fmt: str = "auto", **kwargs: Any) -> list[Turn]:
    """All turns of the file, sorted by time (stable). kwargs go to the ShareGPT loader.
    TraceError (one line: where, and why) for a file that is not a trace of that format."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "bidaw":
        from bench.traces.bidaw_format import load_bidaw
        turns = load_bidaw(path)
    elif fmt == "mooncake":
        from bench.traces.mooncake import load_mooncake
        turns = load_mooncake(path)
    elif fmt == "sharegpt":
        from bench.traces.sharegpt import load_sharegpt
        turns = load_sharegpt(path, **kwargs)
    else:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    if not turns:
        raise TraceError(path, None, f"no turns in it, read as the {fmt} format")
    return turns
