"""The dispatcher's load-or-recompute decisions (`--restore-choice on`), as a part of the
Dispatcher (scheduler/dispatcher.py: its queue, worker pool, stores, restore chooser, pending
turns and loads in flight, all under its lock): when a turn arrives, when the queue would start
its load, and each time a part of a prepared load read end first lands while the turn waits."""
from __future__ import annotations

import logging

from scheduler.policy import WAITING, QueuedRequest
from scheduler.restore_chooser import RestorePlan

log = logging.getLogger("bidaw.scheduler")


class RestoreDecisions:
    def _plan_at_arrival(self, loc, prompt_tokens: int) -> RestorePlan | None:
        """The restore choice for an arriving turn whose KV is on SSD or loading (under the
        lock; LiveRestoreChooser.at_arrival). None: the turn waits for its load."""
        if self.restore is None:
            return None
        waiting = sum(r.kv_bytes for r in map(self.queue.get, self._pending)
                      if r is not None and r.state == WAITING)
        return self.restore.at_arrival(loc, prompt_tokens, self.queue.ready_len, waiting,
                                       self.pool.running(), self.pool.slots())

    def _take_landed_ends(self, now: float) -> None:
        """A turn waiting for a load read end first (a prepare's) is asked again each time a
        part lands (under the lock): taking the landed end over, it is ready now."""
        for rid, (session_id, _) in list(self._loading.items()):
            loc, pending = self.stores.location(session_id), self._pending.get(rid)
            landed = getattr(loc, "landed_from_token", 0)
            if pending is None or not landed or pending.landed_asked == landed:
                continue
            pending.landed_asked = landed
            plan = self._plan_at_arrival(loc, pending.prompt_tokens)
            if plan is not None:
                del self._loading[rid]
                self._ready_now(pending, plan, now)

    def _restore_instead(self, r: QueuedRequest, now: float) -> bool:
        """The restore choice for a load about to start (under the lock): True if the turn
        recomputes or loads a prefix itself instead (it is ready now)."""
        pending = self._pending.get(r.request_id)
        if self.restore is None or pending is None:
            return False
        left = [loc.load_estimate_s if loc is not None else 0.0  # the disk time in flight
                for loc in map(self.stores.location, (s for s, _ in self._loading.values()))
                if loc is None or not loc.waiting_for_room]  # (one waiting for room reads none)
        plan = self.restore.choose(self.stores.location(str(r.session_id)),
                                   pending.prompt_tokens, self.queue.ready_len, tuple(left),
                                   self.pool.running(), slots=self.pool.slots())
        if plan is None:
            return False
        log.debug("restore choice for %s of %r: %s", r.request_id, r.session_id, plan)
        self._ready_now(pending, plan, now)
        return True

    def _ready_now(self, pending, plan: RestorePlan, now: float) -> None:
        """The turn does not wait for its load: its worker restores by `plan`."""
        pending.kv_max_tokens, pending.kv_suffix_from = plan.max_tokens, plan.suffix_from
        self.queue.load_finished(pending.seq)
        pending.ready_at = now
