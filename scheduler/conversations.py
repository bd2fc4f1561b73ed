"""The conversation index: which stored session a history continues, or branches from.

Pure (the clock is passed in), one lock. It maps the key of every prefix of a recorded history
(conversation_keys.py) to the session that holds its KV, and each session to its head (its
whole history's key, answer included), its last prompt's key and whether a turn of it is in
flight. A history continues an idle session when its longest known prefix is that session's
head (`CONTENT`), or when it extends that session's last prompt but not the answer recorded
after it and is longer than the recorded history (`REVISED`): the client re-spelt our answer
(inference-perf joins raw turns with spaces) or dropped a reminder it had appended to its
question (aider: `Prompt.trims`) and went on, so the session goes on from its prompt, not a
new copy of its KV each turn. A regenerated answer (the prompt again, or a history no longer
than the recorded one) branches: both answers live on. Raw text or token ids: the heads and
prompts tried are `head(length)` at the lengths recorded from the boundary where a known
prefix ends. Any shorter match is a branch, a new session reading the common prefix from its
parent: the session whose whole last prompt it extends if one does, else the one that last
recorded its longest known prefix. A session its client names is recorded `named`: never
continued by another's content, only a parent; while it holds no KV it may read a common
beginning from any other (`branch_source`: a shared system prompt or document).

Bounded: at most `max_keys` prefix keys, least recently used idle sessions forgotten first, and
those idle for `ttl_s` or reported gone. `record` returns what it linked (a `Recorded`) and
`restore` links it again: the journal (conversation_journal.py) keeps the index over a restart.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from scheduler.conversation_records import (BRANCH, CONTENT, NEW, REVISED, Match, Prompt,
                                            Recorded, SessionEntry)


class ConversationIndex:
    def __init__(self, max_keys: int = 1_000_000, ttl_s: float = 3600.0, grace_s: float = 10.0):
        self.max_keys, self.ttl_s, self.grace_s = max_keys, ttl_s, grace_s
        self._sessions: OrderedDict[str, SessionEntry] = OrderedDict()  # least recently used first
        self._keys: dict[bytes, str] = {}  # prefix key -> the session that last recorded it
        self._heads: dict[bytes, dict[str, None]] = {}  # head key -> sessions at that head
        self._prompts: dict[bytes, dict[str, None]] = {}  # last prompt's key -> its sessions
        self._trims: dict[bytes, dict[str, None]] = {}  # Prompt.trims' keys -> their sessions
        # chunked: boundary key -> {recorded length (a history's or prompt's): how many end there}
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
                head: Callable[[int], bytes | None] | None = None, extent: int = 0) -> Match:
        """The session a turn whose history has prefix keys `keys` (k_0 first) runs in; marks
        it in flight. `alive(session)`: False when its KV is known to be gone (forgotten).
        `head(length)`: a chunked history's key of its first `length` units. `extent`: the
        history's messages (chunked: units)."""
        with self._lock:
            self._expire(now)
            # A session whose whole history this one extends goes on, even where another
            # recorded more of it (the same messages sent with an id, or twice): a branch there
            # would start a new session, a new copy of the KV, at every turn.
            # A revision only where nothing shares more: the deepest prompt it extends, as deep
            # as the longest prefix recorded (an answer regenerated deep in a conversation
            # branches, never revises an old session whose prompt was its first message).
            parent, depth = self._longest_recorded(keys, "", now, alive)
            prompted, at = "", 0  # the deepest session whose last prompt this one extends
            for d in range(len(keys) - 1, -1, -1):
                for session, whole in self._ending_at(keys[d], now, alive, head):
                    entry = self._sessions[session]
                    if not entry.in_flight and not entry.named and (whole or (
                            not prompted and d >= depth and extent > entry.extent)):
                        self._touch(session, now).in_flight = True
                        return Match(CONTENT if whole else REVISED, session)
                    if not whole and not prompted:
                        prompted, at = session, d
            if parent and parent not in self._sessions:  # forgotten since (gone)
                parent, depth = self._longest_recorded(keys, "", now, alive)
            if prompted and prompted in self._sessions and at >= depth:
                parent, depth = prompted, at  # all of its prompt, not a chunk boundary's share
                self._touch(parent, now)
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
               length: int = -1, named: bool = False, prompt: Prompt | None = None,
               extent: int = 0) -> Recorded:
        """A turn of `session` finished: `keys` are the prefix keys of its messages and answer
        (k_0 first); the last is its new head. A chunked history: its boundary keys, then its
        head; `length`, its units. `named`: its client names it. `prompt`: the turn's prompt,
        `extent`: the recorded history's messages (chunked: units). Returns what was linked,
        for the journal."""
        with self._lock:
            entry = self._sessions.get(session)
            if entry is None:  # forgotten while its turn ran: it is known again
                entry = self._sessions[session] = SessionEntry()
            entry.named = named
            boundary = keys[-2] if length >= 0 else b""
            if prompt is not None and prompt.key == keys[-1]:
                prompt = None  # no answer recorded after it (a stopped turn)
            self._link(session, entry, keys[1:], boundary, length, now, prompt, extent)
            return self._recorded(session, entry)

    def restore(self, recorded: Recorded, touched: float) -> None:
        """Link `recorded` again as last used at `touched` (a journal's replay, oldest first;
        a session already known is replaced)."""
        with self._lock:
            entry = self._sessions.get(recorded.session)
            if entry is None:
                entry = self._sessions[recorded.session] = SessionEntry()
            self._unlink(recorded.session, entry)
            entry.parent, entry.shared = recorded.parent, recorded.shared
            entry.named = recorded.named
            self._link(recorded.session, entry, recorded.path, recorded.boundary,
                       recorded.length, touched, recorded.prompt, recorded.extent)

    def recorded(self) -> list[tuple[Recorded, float]]:
        """Every session with a recorded turn and when it was last used, least recently used
        first (what a journal's snapshot holds)."""
        with self._lock:
            return [(self._recorded(session, e), e.touched)
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

    def sessions_under(self, prefix: str) -> list[str]:
        """The sessions it knows whose ids begin with `prefix` (a tenant's: "tenant/")."""
        with self._lock:
            return [s for s in self._sessions if s.startswith(prefix)]

    def forget(self, session: str) -> bool:
        """The store holds no KV for it any more, or it ended; whether it was known."""
        with self._lock:
            return self._forget(session)

    # -- under the lock ---------------------------------------------------------------------

    @staticmethod
    def _recorded(session: str, e: SessionEntry) -> Recorded:
        return Recorded(session, tuple(e.path), e.boundary, e.length, e.parent, e.shared,
                        e.named, e.prompt, e.extent)

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

    def _link(self, session: str, entry: SessionEntry, path, boundary: bytes, length: int,
              now: float, prompt: Prompt | None = None, extent: int = 0) -> None:
        self._unlink(session, entry)
        entry.path = list(path)
        entry.in_flight = False
        entry.length = length
        entry.prompt, entry.extent = prompt, extent
        self._touch(session, now)
        for key in entry.path:
            self._keys[key] = session
        if entry.path and not entry.named:  # a named session is never continued by content
            self._heads.setdefault(entry.path[-1], {})[session] = None
        if prompt is not None:  # (a named session's too: a parent, never revised)
            self._prompts.setdefault(prompt.key, {})[session] = None
            for trim in prompt.trims:
                self._trims.setdefault(trim, {})[session] = None
        if length >= 0:
            entry.boundary = boundary
            self._count_length(boundary, length, 1)
        if prompt is not None and prompt.length >= 0:
            self._count_length(prompt.boundary, prompt.length, 1)
        self._bound(now)

    def _count_length(self, boundary: bytes, length: int, by: int) -> None:
        lengths = self._lengths.setdefault(boundary, {})
        lengths[length] = lengths.get(length, 0) + by
        if not lengths[length]:
            del lengths[length]
            if not lengths:
                del self._lengths[boundary]

    def _ending_at(self, key: bytes, now: float, alive: Callable[[str], bool],
                   head: Callable[[int], bytes | None] | None) -> list[tuple[str, bool]]:
        """The sessions whose whole history (True) or last prompt (False) the turn's history
        extends, found at its prefix key `key` (chunked: every length recorded from that
        boundary, longest first); sessions reported gone are forgotten on the way."""
        if head is None:
            found = [key]
        else:
            lengths = sorted(self._lengths.get(key, ()), reverse=True)
            found = [h for h in map(head, lengths) if h is not None]
        ending = []
        for key_ in found:
            for sessions, whole in ((self._heads, True), (self._prompts, False),
                                    (self._trims, False)):
                for session in list(sessions.get(key_, ())):
                    if self._gone(session, now, alive):
                        self._forget(session)
                    else:
                        ending.append((session, whole))
        return ending

    def _start(self, how: str, session: str, parent: str, now: float,
               shared: int = 0) -> Match:
        self._sessions[session] = SessionEntry(in_flight=True, touched=now, parent=parent,
                                           shared=shared)
        return Match(how, session, parent)

    def _gone(self, session: str, now: float, alive: Callable[[str], bool]) -> bool:
        """Its KV is reported gone; not asked within `grace_s` of its last turn, whose KV the
        store's location stream may not have announced yet."""
        entry = self._sessions[session]
        return (not entry.in_flight and now - entry.touched > self.grace_s
                and not alive(session))

    def _touch(self, session: str, now: float) -> SessionEntry:
        entry = self._sessions[session]
        entry.touched = now
        self._sessions.move_to_end(session)
        return entry

    def _unlink(self, session: str, entry: SessionEntry) -> None:
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
            _drop(self._heads, entry.path[-1], session)
        if entry.prompt is not None:
            _drop(self._prompts, entry.prompt.key, session)
            for trim in entry.prompt.trims:
                _drop(self._trims, trim, session)
            if entry.prompt.length >= 0:
                self._count_length(entry.prompt.boundary, entry.prompt.length, -1)
            entry.prompt = None
        if entry.length >= 0:
            self._count_length(entry.boundary, entry.length, -1)
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

    def _drop_oldest(self, while_: Callable[[SessionEntry], bool], now: float) -> None:
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


def _drop(sessions_at: dict[bytes, dict[str, None]], key: bytes, session: str) -> None:
    sessions = sessions_at.get(key, {})
    sessions.pop(session, None)
    if not sessions:
        sessions_at.pop(key, None)
