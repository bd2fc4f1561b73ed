"""Format dispatch: `load_trace(path, "bidaw" | "mooncake" | "sharegpt" | "auto")`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.traces.turn import Turn

FORMATS = ("auto", "bidaw", "mooncake", "sharegpt")


def detect_format(path: str | Path) -> str:
    p = str(path)
    if p.endswith(".jsonl"):
        return "mooncake"
    if p.endswith(".json"):
        return "sharegpt"
    return "bidaw"


def load_trace(path: str | Path, fmt: str = "auto", **kwargs: Any) -> list[Turn]:
    """All turns of the file, sorted by time (stable). kwargs go to the ShareGPT loader."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "bidaw":
        from bench.traces.bidaw_format import load_bidaw
        return load_bidaw(path)
    if fmt == "mooncake":
        from bench.traces.mooncake import load_mooncake
        return load_mooncake(path)
    if fmt == "sharegpt":
        from bench.traces.sharegpt import load_sharegpt
        return load_sharegpt(path, **kwargs)
    raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
