"""What a turn's access log line says of its KV: how its conversation was found, which session
it ran in (a short digest: the line correlates one conversation's turns without showing its
id) and how much of its prompt was read from cache. The middleware opens one note per request;
the turn code fills it from the scheduler's events, a context variable apart (no signatures
change along the way)."""
from __future__ import annotations

import contextvars
import hashlib
from dataclasses import dataclass, field

_NOTE: contextvars.ContextVar["TurnNote | None"] = contextvars.ContextVar("bidaw_turn_note",
                                                                          default=None)


@dataclass
class TurnNote:
    found: list[str] = field(default_factory=list)  # recognised, session digest: first turn's
    turns: int = 0
    cached: int = 0
    prompt: int = 0

    def __str__(self) -> str:
        if not self.found and not self.turns:
            return ""
        many = f" turns={self.turns}" if self.turns > 1 else ""
        cached = f" cached={self.cached}/{self.prompt}" if self.turns else ""
        return "".join(f" {part}" for part in self.found) + cached + many


def begin() -> TurnNote:
    """A fresh note for this request (the middleware's, before the handler runs)."""
    note = TurnNote()
    _NOTE.set(note)
    return note


def found(recognised: str, scoped_session: str) -> None:
    """The scheduler's first event: how the conversation was found, and where it ran."""
    note = _NOTE.get()
    if note is not None and not note.found:
        digest = hashlib.sha256(scoped_session.encode()).hexdigest()[:8]
        note.found = [recognised, f"session={digest}"]


def finished(summary) -> None:
    """A turn's summary: its prompt and what of it was read from cache."""
    note = _NOTE.get()
    if note is not None:
        note.turns += 1
        note.cached += summary.cached_tokens
        note.prompt += summary.prompt_tokens
