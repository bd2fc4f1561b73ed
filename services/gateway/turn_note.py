"""What a turn's access log line says of its KV: how its conversation was found, which session
it ran in (a short digest: the line correlates one conversation's turns without showing its
id) and how much of its prompt was read from cache. The middleware opens one note per request;
the turn code fills it from the scheduler's events, a context variable apart (no signatures
change along the way)."""
from __future__ import annotations

import contextvars
import hashlib
from dataclasses import dataclass

_NOTE: contextvars.ContextVar["TurnNote | None"] = contextvars.ContextVar("bidaw_turn_note",
                                                                          default=None)


@dataclass
class TurnNote:
    recognised: str = ""  # how the (first) turn's conversation was found
    session: str = ""  # its session's digest
    turns: int = 0
    cached: int = 0
    prompt: int = 0

    def __str__(self) -> str:
        found = f" {self.recognised} session={self.session}" if self.recognised else ""
        cached = f" cached={self.cached}/{self.prompt}" if self.turns else ""
        return found + cached + (f" turns={self.turns}" if self.turns > 1 else "")


def begin() -> TurnNote:
    """A fresh note for this request (the middleware's, before the handler runs)."""
    note = TurnNote()
    _NOTE.set(note)
    return note


def found(recognised: str, scoped_session: str) -> None:
    """The scheduler's first event: how the conversation was found, and where it ran."""
    note = _NOTE.get()
    if note is not None and not note.recognised:
        note.recognised = recognised
        note.session = hashlib.sha256(scoped_session.encode()).hexdigest()[:8]


def finished(summary) -> None:
    """A turn's summary: its prompt and what of it was read from cache."""
    note = _NOTE.get()
    if note is not None:
        note.turns += 1
        note.cached += summary.cached_tokens
        note.prompt += summary.prompt_tokens
