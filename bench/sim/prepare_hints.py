"""When a client would say a turn is coming (`--prepare-lead-s`): POST /v1/sessions/{id}/prepare.

A chat front end knows before the store does that a conversation is about to continue: its
user has started typing. The replay models a client that says so `lead` trace seconds before
each turn arrives, never before the session's previous turn (nothing is typed before the answer
it replies to). Pure: the schedule is drawn from the trace once, before the replay.
"""
from __future__ import annotations

from bench.sim.cache import AccessLog


def prepare_schedule(log: AccessLog, lead: float) -> list[tuple[float, int, int]]:
    """(when the client says so, the session, its KV bytes at that turn) for every turn that
    follows an earlier one of its session, in time order."""
    if lead < 0:
        raise ValueError(f"--prepare-lead-s must be >= 0 seconds (got {lead})")
    times, users, sizes, nexts = log.times, log.users, log.sizes, log.next_index
    n = len(times)
    said = [(max(times[j] - lead, times[i]), j) for i, j in enumerate(nexts) if j < n]
    said.sort()
    return [(t, users[j], sizes[j]) for t, j in said]
