"""What the load driver writes down: one record per HTTP attempt of a turn."""
from __future__ import annotations

from dataclasses import asdict, dataclass

OK = "ok"                  # 200, the whole answer with the requested token count
SHED_429 = "shed_429"      # refused on purpose (rate, in flight, scheduler full), with Retry-After
SHED_503 = "shed_503"      # refused on purpose (backend unavailable, draining), with Retry-After
ERROR = "error"            # refused or failed otherwise: other status, timeout, connection
MALFORMED = "malformed"    # accepted and finished, but not the answer asked for
UNANSWERED = "unanswered"  # accepted (200 sent) and then no complete answer


@dataclass
class Attempt:
    session: str
    turn: int           # index of the turn in its conversation
    attempt: int        # 0 for the first try of that turn, then retries after shedding
    sent_s: float       # since the start of the run
    status: int = 0     # HTTP status; 0 if none came
    outcome: str = ""
    first_s: float = 0.0  # headers (accepted) received
    end_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    retry_after: float = 0.0
    error: str = ""     # what went wrong; for shedding, the reason the gateway gave

    def to_json(self) -> dict:
        return asdict(self)
