"""The conversation index: which stored session a history continues, or branches from.

Pure (the clock is passed in) and guarded by one lock. It maps the key of every prefix of a
recorded history (scheduler/conversation_keys.py) to the session that holds its KV, and each
session to its head (the key of its whole history, answer included) and whether a turn of it is
in flight. A history continues a session only when its longest known prefix is exactly that
session's head and the session is idle. A raw text or token ids: the heads tried are the
history's own keys `head(length)` at the lengths recorded from the boundary where its longest
known prefix ends (at most one chunk's worth of lengths, however many sessions share it). A
session's KV is only ever appended to, so two conversations that share a beginning never
overwrite each other's tail. Any shorter match is a branch: a new session that reads the common
prefix from the matched one (its parent). A session its client names is recorded too, but
`named`: never continued by another turn's content (its client names it), only a branch's
parent; and a named session that holds no KV yet may read a common beginning from any other
(`branch_source`: other users' shared system prompt, a shared document).

Bounded: at most `max_keys` prefix keys, least recently used idle sessions forgotten first;
a session idle for `ttl_s` is forgotten; so is one the caller reports gone (no KV left).
`record` returns what it linked (a `Recorded`), and `restore` links it again: the journal
(conversation_journal.py) keeps the index across a restart with them.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

CONTENT, BRANCH, NEW = "content", "branch", "new"


@dataclass
class _Session:
    path: list[bytes] = field(default_factory=list)  # prefix keys it recorded; path[-1]: head
    in_flight: bool = False
    touched: float = 0.0
    parent: str = ""  # a branch: the session it shares path[:shared] with
    shared: int = 0
    boundary: bytes = b""  # a chunked history: the key of its last chunk boundary
    length: int = -1  # a chunked history's recorded length (-1: messages)
    named: bool = False  # its client names it: a parent for branches, never continued


@dataclass(frozen=True)
class Match:
    recognised: str  # CONTENT, BRANCH or NEW
    session: str  # the session the turn runs in
    parent: str = ""  # BRANCH: the session whose KV holds the common prefix


@dataclass(frozen=True)
class Recorded:
    """A recorded session, as `restore` links it again."""
    session: str
    path: tuple[bytes, ...]  # its prefix keys after k_0; the last is its head
    boundary: bytes = b""  # a chunked history: its last chunk boundary's key
    length: int = -1  # a chunked history's length in units (-1: messages)
    parent: str = ""  # a branch: the session it shares path[:shared] with
    shared: int = 0
    named: bool = False


class ConversationIndex:
    def __init__(self, max_keys: int = 1_000_000, ttl_s: float = 3600.0, grace_s: float = 10.0):
        self.max_keys = max_keys
        self.ttl_s = ttl_s
        self.grace_s = grace_s
        self._sessions: OrderedDict[str, _Session] = OrderedDict()  # least recently used first
        self._keys: dict[bytes, str] = {}  # prefix key -> the session that last recorded it
        self._heads: dict[bytes, dict[str, None]] = {}  # head key -> sessions at that head
        # chunked histories: boundary key -> {recorded length: sessions of that length there}
        self._lengths: dict[bytes, dict[int, int]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    @property
    def keys_held(self) -> int:
        with self._lock:
            return len(self._keys)

    def resolve(self, keys: list[bytes], new_session: Callable[[], str], now: float,
                alive: Callable[[str], bool] = lambda s: True,
                head: Callable[[int], bytes | None] | None = None) -> Match:
        """The session a turn whose history has prefix keys `keys` (k_0 first) runs in; marks
        it in flight. `alive(session)`: False when its KV is known to be gone (forgotten).
        `head(length)`: a chunked history's key of its first `length` units."""
        with self._lock:
            self._expire(now)
            # A session whose whole history this one extends goes on, even where another
            # recorded more of it (the same messages sent with an id, or twice): a branch there
            # would start a new session, a new copy of the KV, at every turn.
            for key in reversed(keys):
                session = self._continued(key, now, alive, head)
                if session:
                    self._touch(session, now).in_flight = True
                    return Match(CONTENT, session)
            parent, depth = self._longest_recorded(keys, "", now, alive)
            if parent:
                return self._start(BRANCH, new_session(), parent, now, depth)
            return self._start(NEW, new_session(), "", now)

    def branch_source(self, keys: list[bytes], session: str, now: float,
                      alive: Callable[[str], bool] = lambda s: True) -> str:
        """For a named `session` that holds no KV: the other session that recorded the
        longest prefix of `keys` (k_0 alone is none), whose KV it may read; "" if none."""
        with self._lock:
            return self._longest_recorded(keys, session, now, alive)[0]

    def record(self, session: str, keys: list[bytes], now: float,
               length: int = -1, named: bool = False) -> Recorded:
        """A turn of `session` finished: `keys` are the prefix keys of its messages and answer
        (k_0 first); the last is its new head. A chunked history: its boundary keys, then its
        head; `length`, its units. `named`: its client names it. Returns what was linked, for
        the journal."""
        with self._lock:
            entry = self._sessions.get(session)
            if entry is None:  # forgotten while its turn ran: it is known again
                entry = self._sessions[session] = _Session()
            entry.named = named
            boundary = keys[-2] if length >= 0 else b""
            self._link(session, entry, keys[1:], boundary, length, now)
            return Recorded(session, tuple(entry.path), entry.boundary, entry.length,
                            entry.parent, entry.shared, named)

    def restore(self, recorded: Recorded, touched: float) -> None:
        """Link `recorded` again as last used at `touched` (a journal's replay, oldest first;
        a session already known is replaced)."""
        with self._lock:
            entry = self._sessions.get(recorded.session)
            if entry is None:
                entry = self._sessions[recorded.session] = _Session()
            self._unlink(recorded.session, entry)
            entry.parent, entry.shared = recorded.parent, recorded.shared
            entry.named = recorded.named
            self._link(recorded.session, entry, recorded.path, recorded.boundary,
                       recorded.length, touched)

    def recorded(self) -> list[tuple[Recorded, float]]:
        """Every session with a recorded turn and when it was last used, least recently used
        first (what a journal's snapshot holds)."""
        with self._lock:
            return [(Recorded(session, tuple(e.path), e.boundary, e.length, e.parent, e.shared,
                              e.named), e.touched)
                    for session, e in self._sessions.items() if e.path]

    def abandon(self, session: str) -> None:
        """Its turn failed: nothing is recorded; a session with no recorded turn is dropped."""
        with self._lock:
            entry = self._sessions.get(session)
            if entry is None:
                return
            entry.in_flight = False
            if not entry.path:
                del self._sessions[session]

    def forget(self, session: str) -> bool:
        """The store holds no KV for it any more, or it ended; whether it was known."""
        with self._lock:
            return self._forget(session)

    # -- under the lock ---------------------------------------------------------------------

    def _longest_recorded(self, keys: list[bytes], other_than: str, now: float,
                          alive: Callable[[str], bool]) -> tuple[str, int]:
        """(the session, not `other_than`, that recorded the longest prefix of `keys`, its
        depth); ("", 0) if none (k_0 alone, the tenant, is no common prefix). Touched."""
        for depth in range(len(keys) - 1, 0, -1):
            parent = self._keys.get(keys[depth])
            if parent and parent != other_than and self._gone(parent, now, alive):
                self._forget(parent)
                parent = self._keys.get(keys[depth])  # forgetting may leave it to no one
            if parent and parent != other_than:
                self._touch(parent, now)
                return parent, depth
        return "", 0

    def _link(self, session: str, entry: _Session, path, boundary: bytes, length: int,
              now: float) -> None:
        self._unlink(session, entry)
        entry.path = list(path)
        entry.in_flight = False
        entry.length = length
        self._touch(session, now)
        for key in entry.path:
            self._keys[key] = session
        if entry.path and not entry.named:  # a named session is never continued by content
            self._heads.setdefault(entry.path[-1], {})[session] = None
        if length >= 0:
            entry.boundary = boundary
            lengths = self._lengths.setdefault(boundary, {})
            lengths[length] = lengths.get(length, 0) + 1
        self._bound(now)

    def _continued(self, key: bytes, now: float, alive: Callable[[str], bool],
                   head: Callable[[int], bytes | None] | None) -> str:
        """An idle session whose whole history the turn's extends, found at prefix key `key`
        (chunked: the longest recorded from that boundary); "" when none."""
        if head is None:
            heads = [key]
        else:
            lengths = sorted(self._lengths.get(key, ()), reverse=True)
            heads = [h for h in map(head, lengths) if h is not None]
        for found in heads:
            for session in list(self._heads.get(found, ())):
                if self._gone(session, now, alive):
                    self._forget(session)
                elif not self._sessions[session].in_flight:
                    return session
        return ""

    def _start(self, how: str, session: str, parent: str, now: float,
               shared: int = 0) -> Match:
        self._sessions[session] = _Session(in_flight=True, touched=now, parent=parent,
                                           shared=shared)
        return Match(how, session, parent)

    def _gone(self, session: str, now: float, alive: Callable[[str], bool]) -> bool:
        """Its KV is reported gone; not asked within `grace_s` of its last turn, whose KV the
        store's location stream may not have announced yet."""
        entry = self._sessions[session]
        return (not entry.in_flight and now - entry.touched > self.grace_s
                and not alive(session))

    def _touch(self, session: str, now: float) -> _Session:
        entry = self._sessions[session]
        entry.touched = now
        self._sessions.move_to_end(session)
        return entry

    def _unlink(self, session: str, entry: _Session) -> None:
        """Drop its keys; a prefix it shares with its parent goes back to the parent, so that
        forgetting the last of many conversations with one beginning keeps that beginning."""
        heir = entry.parent if entry.parent in self._sessions else ""
        for i, key in enumerate(entry.path):
            if self._keys.get(key) == session:
                if heir and i < entry.shared:
                    self._keys[key] = heir
                else:
                    del self._keys[key]
        if entry.path:
            heads = self._heads.get(entry.path[-1], {})
            heads.pop(session, None)
            if not heads:
                self._heads.pop(entry.path[-1], None)
        if entry.length >= 0:
            lengths = self._lengths[entry.boundary]
            lengths[entry.length] -= 1
            if not lengths[entry.length]:
                del lengths[entry.length]
                if not lengths:
                    del self._lengths[entry.boundary]
            entry.length = -1  # unlinked: a later record links it afresh

    def _forget(self, session: str) -> bool:
        entry = self._sessions.pop(session, None)
        if entry is not None:
            self._unlink(session, entry)
        return entry is not None

    def _expire(self, now: float) -> None:
        self._drop_oldest(lambda entry: now - entry.touched >= self.ttl_s, now)

    def _bound(self, now: float) -> None:
        self._drop_oldest(lambda entry: len(self._keys) > self.max_keys, now)

    def _drop_oldest(self, while_: Callable[[_Session], bool], now: float) -> None:
        """Forget least recently used sessions while `while_(oldest)`; one in flight is in use,
        so it counts as used now (moved to the back) instead."""
        for _ in range(len(self._sessions)):
            session, entry = next(iter(self._sessions.items()))
            if not while_(entry):
                return
            if entry.in_flight:
                self._touch(session, now)
            else:
                self._forget(session)
