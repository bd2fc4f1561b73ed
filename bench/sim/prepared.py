"""Clients that say their user is typing, in the timed simulator (`--prepare-lead-s R`,
`--prepare-share F`): `POST /v1/sessions/{id}/prepare` R seconds before a turn arrives, never
before the user's previous turn has its last token (nothing is typed before the answer it
replies to). The clock is already simulated real seconds, so R is used as given. Only the share
F of the users have such clients (`bench.sim.prepare_hints.prepares`, the cache-only replay's
draw by user id), and only turns that follow an earlier one of their user are said.

Why: a chat front end knows a conversation continues before the store does, so the KV can be
read while the user types, with no guess (docs/policies.md, "A client that says its user is
typing", models the same clients in the cache-only replay). What the store does, for every
tiered system, as the live store and the cache-only replay do:
- KV on SSD only (not in DRAM, not being promoted) is queued for a prepared read. Reads go one at
  a time, each started only while no demand load is in flight (a turn already waiting goes
  first) and before any promotion (bench.sim.promote waits while one is queued or in flight). A
  demand load that starts during a prepared read pauses it, as it pauses a promotion
  (`background`, bench.sim.ssd).
- KV already in DRAM is pinned there until its turn (the store's hold).
- A landed read takes DRAM (the policy evicts others to make room) but stays pinned and outside
  the policy's ranking, with no access counted: the turn's arrival is its one access (`admit`),
  as in the cache-only replay. A policy that learns from gaps between accesses then sees the
  user's real gap, not the read's landing.
- A turn that arrives before its read begins makes it a demand read; one that arrives during
  the read waits for it (queued LOADING, the read now urgent) instead of reading twice. With
  bidaw-prefetch (`suffix_loads`) the read goes end first and the turn takes it over
  (`hand_over`): the landed end is kept and the restore choice decides for the rest. (The live
  store does not yet: it reads a prepared KV from its beginning.)
- bidaw-prefetch stops guessing for that user (`PrefetchPlanner.announced`): its client says.
A prepare is said only for a turn that follows, so the end oracle never frees a session with a
prepared read or pin pending.
Counts for measured turns: `prepared_reads`, `prepared_read_bytes` (reads begun for them, less
what a handed-over read never moved), `prepare_hits` (turns that found the KV a prepared read
brought into DRAM) and `prepared_handed_over`.
"""
from __future__ import annotations

from typing import Any

from bench.sim.prepare_hints import check_prepare, prepares
from scheduler.policy import (KV_DRAM, KV_LOADING, RECOMPUTE, SPLIT_REVERSED,
                              WAIT_FOR_LOAD)

PREPARE = 4         # an event kind beside bench.sim.events' and PROMOTE: a client's prepare
PREPARED = "r"      # a prepared read's SSD transfer id: (PREPARED, user)


class Preparer:
    def __init__(self, sim: Any, lead_s: float, share: float = 1.0) -> None:
        check_prepare(lead_s, share)
        self.sim, self.lead_s, self.share = sim, lead_s, share
        self.queued: dict[int, int] = {}  # user -> its turn, read not begun (in said order)
        self.reading: int | None = None   # the user whose prepared read is in flight
        self.turn = -1                    # the turn it is for; -1 once that turn has arrived
        self.waiting: Any = None          # that turn, if it waits for the read
        self.held: dict[int, int] = {}    # user -> bytes landed: pinned, outside the ranking
        self.kept: set[int] = set()       # in DRAM when said: pinned till the turn
        self.counts = {"prepared_reads": 0, "prepared_read_bytes": 0, "prepare_hits": 0,
                       "prepared_handed_over": 0}
        sim.log.prepares = self.counts

    @property
    def busy(self) -> bool:
        """A prepared read is queued or in flight (promotions wait)."""
        return self.reading is not None or bool(self.queued)

    def schedule(self, j: int, finished_at: float, arrival: float) -> None:
        """Turn `j` arrives at `arrival`; its user's previous turn finished at `finished_at`."""
        if prepares(self.sim.w.user[j], self.share):
            self.sim.events.push(max(finished_at, arrival - self.lead_s), PREPARE, j)

    def said(self, j: int, now: float) -> None:
        """The PREPARE event: turn `j`'s client says it is coming."""
        sim = self.sim
        if j in sim.jobs:  # said at the very instant it arrived: too late to matter
            return
        user, store = sim.w.user[j], sim.store
        promoter = sim.promoter
        if promoter is not None:
            promoter.planner.announced(user)  # its client says when: no more guesses
            if promoter.reading == user:  # being promoted: the turn will wait for that read
                return
        dram = store.dram
        if user in dram:
            self.kept.add(user)
            store.pinned.add(user)
        elif (user in store.ssd and user not in self.held and user != self.reading
              and store.ssd.size(user) <= dram.capacity - dram.watermark):  # else lost on landing
            self.queued.setdefault(user, j)
            self.maybe_start(now)

    def maybe_start(self, now: float) -> None:
        """Start the next prepared read if no demand load and no prepared read is in flight."""
        sim = self.sim
        if self.reading is not None or sim.reads_in_flight:
            return
        store = sim.store
        while self.queued:
            user = next(iter(self.queued))
            j = self.queued.pop(user)
            if user in store.ssd and user not in store.dram:
                break
        else:
            return
        self.reading, self.turn = user, j
        nbytes = store.read_from_ssd(user, now)
        if sim.w.measured[j]:
            self.counts["prepared_reads"] += 1
            self.counts["prepared_read_bytes"] += nbytes
        sim.ssd.start((PREPARED, user), nbytes, now, background=True)
        sim.arm_ssd()

    def arrived(self, job: Any) -> bool:
        """`job`'s turn arrives. True if the KV its prepared read brought is now in DRAM, the
        turn's access counted (`admit`): the caller counts no other."""
        user, store = job.user, self.sim.store
        self.queued.pop(user, None)  # a read not begun: the turn's demand read now
        if user == self.reading:
            self.turn = -1
        if user in self.kept:
            self.kept.discard(user)
            store.pinned.discard(user)  # a normal DRAM hit from now on
        size = self.held.pop(user, None)
        if size is None:
            return False
        store.pinned.discard(user)
        store.dram.used -= size
        store.dram.admit(user, size, job.arrival)
        self.counts["prepare_hits"] += int(self.sim.w.measured[job.i])
        return True

    def left_s(self, now: float) -> float:
        """Seconds until the prepared read in flight lands, if nothing else starts."""
        return self.sim.ssd.finish_estimates(now).get((PREPARED, self.reading), 0.0)

    def wait_for(self, job: Any) -> None:
        """`job`'s turn waits for its prepared read in flight (queued LOADING), now urgent."""
        sim = self.sim
        self.waiting = job
        sim.store.pinned.add(job.user)  # as a demand load's: it stays until the turn runs
        sim.ssd.expedite((PREPARED, self.reading), job.arrival)
        sim.arm_ssd()

    def hand_over(self, job: Any, now: float) -> str:
        """`suffix_loads`: `job`'s turn arrives during its prepared read, which reads the history
        end first. The end landed is kept; for the beginning not landed yet the restore choice
        decides: read it (the turn waits, the read now urgent), recompute it in the turn's own
        prefill (the read stops) or recompute part of it while the read finishes the rest (a
        reversed split whose end is partly read already). Returns where the turn is queued."""
        sim, tid, user = self.sim, (PREPARED, self.reading), job.user
        total = sim.store.ssd.size(user)
        left = sim.ssd.left(tid, now)
        m = min(job.hist, -(-int(job.hist * left) // max(total, 1)))  # tokens not landed
        best = sim.chooser.best_at_arrival(job, m, int(left), now, self.left_s(now)) if m else None
        if best is None or best.name not in (RECOMPUTE, SPLIT_REVERSED):
            sim.chooser.count(job, WAIT_FOR_LOAD)
            self.wait_for(job)
            return KV_LOADING
        k = m if best.name == RECOMPUTE else best.k  # the beginning recomputed
        rest = (m - k) * total / job.hist  # bytes still to read
        sim.chooser.count(job, best.name)
        if sim.w.measured[job.i]:
            self.counts["prepared_handed_over"] += 1
            self.counts["prepared_read_bytes"] -= int(left - rest)  # never read
        job.rev_k = k
        sim.store.pinned.add(user)
        sim.ssd.shorten(tid, rest, now)
        if k == m:  # nothing more to read: its prefill recomputes the beginning
            self.reading = None
            sim.arm_ssd()
            job.landed, job.piece = True, 3
            return KV_DRAM
        sim.beginnings.load_started(job)
        self.waiting = job
        sim.ssd.expedite(tid, now)
        sim.arm_ssd()
        return KV_LOADING

    def finished(self, now: float) -> None:
        """The prepared read landed: the KV enters DRAM, for the turn waiting (as a demand load
        does) or pinned until its turn arrives; a turn that came and did not wait (recomputed
        at arrival) drops it."""
        sim, user, job = self.sim, self.reading, self.waiting
        self.reading, self.waiting = None, None
        store = sim.store
        if job is not None and job.rev_k:  # a part: the whole KV enters DRAM at write-back
            job.landed = True
            if sim.beginnings.landed(job):
                sim.queue.load_finished(job.i)
            return
        if user in store.ssd and user not in store.dram:
            if job is not None:
                store.admit_loaded(user, now)
            elif self.turn >= 0:
                self.held[user] = size = store.ssd.size(user)
                store.dram.used += size
                store.pinned.add(user)
        if job is not None:
            sim.queue.load_finished(job.i)
