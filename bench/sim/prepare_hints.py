"""When a client would say a turn is coming (`--prepare-lead-s`): POST /v1/sessions/{id}/prepare.

A chat front end knows before the store does that a conversation is about to continue: its
user has started typing. The replay models a client that says so `lead` trace seconds before
each turn arrives, never before the session's previous turn (nothing is typed before the answer
it replies to); with a `share` below 1, only that share of the users have such clients (a fixed
draw per user id). Pure: the schedule is drawn from the trace once, before the replay.
"""
from __future__ import annotations

from bench.sim.cache import AccessLog


def prepares(user: int, share: float) -> bool:
    """Whether `user`'s client is one of the `share` that prepare (a hash of the id, so that
    the draw does not follow the order users are sampled in)."""
    return (user * 0x9E3779B1) % (1 << 32) < share * (1 << 32)


def check_prepare(lead: float | None, share: float) -> None:
    """ValueError naming the flag, for a lead below 0 or a share outside [0, 1] (every model of
    these clients checks them: the replays, the simulators)."""
    if lead is not None and lead < 0:
        raise ValueError(f"--prepare-lead-s must be >= 0 seconds (got {lead})")
    if not 0 <= share <= 1:
        raise ValueError(f"--prepare-share must be within [0, 1] (got {share})")


def prepare_schedule(log: AccessLog, lead: float,
                     share: float = 1.0) -> list[tuple[float, int, int]]:
    """(when the client says so, the session, its KV bytes at that turn) for every turn that
    follows an earlier one of its session, in time order."""
    check_prepare(lead, share)
    times, users, sizes, nexts = log.times, log.users, log.sizes, log.next_index
    n = len(times)
    said = [(max(times[j] - lead, times[i]), j) for i, j in enumerate(nexts)
            if j < n and prepares(users[j], share)]
    said.sort()
    return [(t, users[j], sizes[j]) for t, j in said]
