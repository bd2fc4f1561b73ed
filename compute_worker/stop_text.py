"""Stop strings over streamed text: text that could still begin a stop string is held back, so
no part of a stop string ever reaches the client (OpenAI / vLLM semantics)."""
from __future__ import annotations


class StopText:
    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.held = ""  # the text's end that may begin a stop string: not released yet
        self.stopped = False  # a stop string completed: the output ended just before it

    def add(self, new: str) -> str:
        """Append `new` text; returns the text now released. Once a stop string completes, the
        text up to its earliest start is released and everything after it is dropped."""
        if self.stopped:
            return ""
        text = self.held + new
        # A match never starts in released text: its start would still have been held back.
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self.held = True, ""
            return text[:min(hits)]
        keep = held_back(text, self.stops)
        self.held = text[len(text) - keep:]
        return text[:len(text) - keep]

    def flush(self) -> str:
        """The generation ended without a stop string: release what was held back."""
        rest, self.held = self.held, ""
        return rest


def held_back(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `stops`."""
    longest = min(max((len(s) for s in stops), default=1) - 1, len(text))
    for k in range(longest, 0, -1):
        tail = text[-k:]
        if any(s.startswith(tail) for s in stops):
            return k
    return 0
