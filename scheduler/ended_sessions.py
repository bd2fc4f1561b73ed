"""Session ends the KV store shards have not all confirmed yet: a shard that was down, out of
membership or cut off when its client ended a session still holds the session's KV on disk, and
must drop it once it is reachable again (a privacy matter: the client asked for the deletion).

Two records, both bounded, oldest first out:
- `owed`: (shard address, session) ends a shard has not confirmed — it was down (or its
  Awareness stream was) at the end, or had not said the KV was gone when the end stopped
  waiting. Every address that was ever a store member since the start counts (one that left
  membership may come back with its data directory). Confirmed by a location of tier NONE, or
  by a snapshot of that shard without the session.
- `ended`: sessions ended and not used again since: a shard the scheduler did not know at the
  end (never a member since the start) that lists one in its snapshot is told to drop it too.
  A turn of the same name (`begun`) takes the session out: KV of it from then on is the new
  conversation's. Ends already owed to an address stay owed (a shard away at the end may only
  hold the old KV: the worst left is one recompute of the new conversation, never the old one's
  KV kept).

The bound (MAX_OWED, MAX_ENDED entries each, ~100 bytes an entry): past it the oldest entries are
forgotten, with a WARNING (one per 5 minutes, counting): a shard away for longer than it takes
its scheduler to end that many sessions keeps those sessions' KV until its own eviction drops it.
Kept in memory only: a restarted scheduler forgets the ends not yet confirmed (docs/reliability.md
says why). Thread-safe; pure (no I/O but the log).
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Iterable

from services.runtime.log_repeats import Reminder, since

log = logging.getLogger("bidaw.scheduler")
MAX_OWED = 100_000  # (shard, session) ends not yet confirmed
MAX_ENDED = 100_000  # sessions ended and not used again since
MAX_SHARDS = 1024  # store addresses remembered (in practice a handful)


class EndedSessions:
    def __init__(self, max_owed: int = MAX_OWED, max_ended: int = MAX_ENDED):
        self.max_owed, self.max_ended = max_owed, max_ended
        self._owed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._shards: OrderedDict[str, None] = OrderedDict()  # every store address seen
        self._lock = threading.Lock()
        self._full = Reminder()
        self.forgotten = 0  # entries dropped at the bound

    def shard_seen(self, target: str) -> None:
        with self._lock:
            self._shards[target] = None
            self._shards.move_to_end(target)
            while len(self._shards) > MAX_SHARDS:
                self._shards.popitem(last=False)

    def shards(self) -> list[str]:
        with self._lock:
            return list(self._shards)

    def ended(self, session_id: str, owed_to: Iterable[str]) -> None:
        """`session_id` ended; the shards at `owed_to` have not confirmed it."""
        with self._lock:
            self._ended[session_id] = None
            self._ended.move_to_end(session_id)
            for target in owed_to:
                self._owed[(target, session_id)] = None
            self._bound()

    def begun(self, session_id: str) -> None:
        """A turn of `session_id` arrived: a session of that name is in use again."""
        with self._lock:
            self._ended.pop(session_id, None)

    def confirmed(self, target: str, session_id: str) -> None:
        """The shard at `target` says it holds nothing of `session_id`."""
        with self._lock:
            self._owed.pop((target, session_id), None)

    def owed(self, target: str) -> list[str]:
        with self._lock:
            return [s for t, s in self._owed if t == target]

    def on_snapshot(self, target: str, listed: Iterable[str]) -> list[str]:
        """The shard at `target` (re)connected and holds `listed`: the sessions it must drop
        (owed to it, or ended while it was not known), owed to it until it confirms; owed
        sessions it does not list are confirmed."""
        listed = set(listed)
        with self._lock:
            owed = {s for t, s in self._owed if t == target}
            for session_id in owed - listed:
                del self._owed[(target, session_id)]
            drop = sorted(s for s in listed if s in owed or s in self._ended)
            for session_id in drop:
                self._owed[(target, session_id)] = None
            self._bound()
        return drop

    def _bound(self) -> None:
        """Under the lock: forget the oldest entries past the bounds, saying so."""
        over = 0
        while len(self._owed) > self.max_owed:
            self._owed.popitem(last=False)
            over += 1
        while len(self._ended) > self.max_ended:
            self._ended.popitem(last=False)
            over += 1
        if over:
            self.forgotten += over
            held = self._full.due()
            if held is not None:
                log.warning("%d session ends not yet confirmed by every KV store shard "
                            "forgotten (bound %d shard ends, %d sessions): a shard away since "
                            "keeps that KV until its own eviction drops it%s", self.forgotten,
                            self.max_owed, self.max_ended, since(held))
