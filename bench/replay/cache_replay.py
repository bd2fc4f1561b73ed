"""A live run's per-turn records replayed through the store's DRAM eviction policies, offline.

The records say when each turn was sent with how much history and when it ended with how much KV
and how long an answer. Fed to the very policies the KV store runs, over a DRAM tier of the same
capacity, they answer "what would policy P have hit on exactly this traffic?". An offline hit
rate far from the live one points at the store, not the policy (this is how eviction by
fragmentation was found). Pure: no I/O, no clocks.

The model of the store: pages of 4 KiB; a turn's session is leased (never a victim) from send to
end; its hit or miss is where its KV is when it is sent (as the live report counts it); a miss
is read from SSD into DRAM when the turn is dispatched (send + its queueing), if room can be
made; a turn's end writes its new KV (the session grows), making room the same way, else the
session leaves DRAM. The policy's clock is the records' clock divided by the replay's time
scale, as the live store's `--policy-time-scale` does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from bench.replay.records import ANSWERED, TurnRecord
from bench.replay.report import hit_counts
from kv_store.eviction.ledger import TierLedger

PAGE = 4096


SEND, DISPATCH, END = 0, 1, 2  # also the order of events at the same instant


@dataclass(frozen=True)
class CacheEvent:
    time: float
    kind: int           # SEND (lease, hit or miss), DISPATCH (a miss is read in), END (write)
    session: str
    nbytes: int         # the session's KV at this event, in whole pages
    answer_tokens: int  # END only


@dataclass(frozen=True)
class CacheOutcome:
    hits: int
    misses: int
    evictions: int

    @property
    def hit_rate(self) -> float:
        return self.hits / max(self.hits + self.misses, 1)

    def to_dict(self) -> dict:
        return dict(hit_rate=self.hit_rate, hits=self.hits,
                    misses=self.misses, evictions=self.evictions)


def pages(nbytes: int) -> int:
    return -(-nbytes // PAGE) * PAGE


def cache_events(records: Iterable[TurnRecord], bytes_per_token: int) -> list[CacheEvent]:
    """Send, dispatch and end events of the answered turns, in time order (at the same instant a
    send comes first, as a lease is taken before another turn's write needs room)."""
    events = []
    for r in records:
        if r.status != ANSWERED:
            continue
        history = pages(r.history_tokens * bytes_per_token)
        stored = pages((r.prompt_tokens + r.completion_tokens) * bytes_per_token)
        events += [CacheEvent(r.sent_s, SEND, r.session, history, 0),
                   CacheEvent(r.sent_s + r.queue_s, DISPATCH, r.session, history, 0),
                   CacheEvent(r.end_s, END, r.session, stored, r.completion_tokens)]
    return sorted(events, key=lambda e: (e.time, e.kind))


def live_hit_rate(records: Sequence[TurnRecord]) -> float | None:
    """The live store's DRAM hit rate over the same turns, as the report counts it (None when no
    turn arrived with stored KV)."""
    hits, stored = hit_counts(records)
    return hits / stored if stored else None


def replay_cache(events: Sequence[CacheEvent], policy, capacity_bytes: int) -> CacheOutcome:
    """Run `events` through `policy` (an EvictionPolicy over a DRAM tier of `capacity_bytes`)."""
    dram = TierLedger(policy, capacity_bytes // PAGE * PAGE)
    leased: dict[str, int] = {}  # sessions with a turn in flight -> how many turns
    hits = misses = 0

    def make_room(need: int, now: float, keep: str) -> bool:
        return dram.make_room(need, now, exclude=set(leased) | {keep})

    for e in events:
        if e.kind == SEND:
            leased[e.session] = leased.get(e.session, 0) + 1
            if e.nbytes:  # nothing stored yet is neither a hit nor a miss
                hits += e.session in dram
                misses += e.session not in dram
        elif e.kind == DISPATCH:
            if e.session in dram:
                dram.touch(e.session, e.time)
            elif e.nbytes and make_room(e.nbytes, e.time, e.session):  # the SSD read lands
                dram.admit(e.session, e.nbytes, e.time)
        else:
            held = dram.size(e.session)
            if make_room(max(e.nbytes - held, 0), e.time, e.session):
                dram.admit(e.session, e.nbytes, e.time)  # held: touched with its new size
            elif held:  # no room for the grown session: it now lives on SSD only
                dram.remove(e.session)
            policy.observe_answer(e.session, e.answer_tokens, e.time)
            leased[e.session] -= 1
            if not leased[e.session]:
                del leased[e.session]
    return CacheOutcome(hits, misses, dram.evictions)
