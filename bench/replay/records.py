"""One record per scripted turn, as the client saw it; JSON Lines on disk.

Times are seconds from the replay start on the client's monotonic clock. `tier_at_arrival` is
where the store held the session's KV just before the turn was sent (from KVStore.Lookup when
the replayer knows the store): that, not `kv_tier`, is the DRAM hit, because a scheduler that
loads SSD KV into DRAM before dispatch makes every worker read report "dram".
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

ANSWERED, FAILED, SKIPPED = "ok", "error", "skipped"


@dataclass
class TurnRecord:
    user: int
    index: int               # position in the user's script
    session: str
    trace_round: int
    history_tokens: int      # planned conversation tokens before the query
    query_tokens: int
    answer_tokens: int       # asked for (max_tokens, ignore_eos)
    think_s: float           # scripted wait after the previous answer
    scheduled_s: float       # earliest send time the script allowed
    status: str = SKIPPED    # ok | error | skipped (never sent: deadline or an earlier error)
    sent_s: float = 0.0
    first_token_s: float = 0.0
    end_s: float = 0.0
    prev_end_s: float = 0.0  # when the same user's previous answer ended (0: first turn)
    error: str = ""
    tier_at_arrival: str = ""  # none | dram | ssd | loading | "" (not looked up)
    kv_bytes_at_arrival: int = 0
    # The client's PrepareSession for this turn (--prepare-lead-s): when it was sent (0: none)
    # and the tier it answered: dram | loading | none | error (failed) | "" (none was sent)
    prepared_s: float = 0.0
    prepared_tier: str = ""
    # From the TurnSummary (server clocks):
    prompt_tokens: int = 0
    cached_tokens: int = 0
    recomputed_tokens: int = 0  # stored tokens recomputed beside the read (a reversed split)
    completion_tokens: int = 0
    kv_tier: str = ""        # tier the worker's read was served from
    server_ttft_s: float = 0.0
    queue_s: float = 0.0
    kv_load_s: float = 0.0
    server_latency_s: float = 0.0
    finish_reason: str = ""

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.sent_s

    @property
    def latency_s(self) -> float:
        return self.end_s - self.sent_s

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def write_jsonl(records: Iterable[TurnRecord], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r.to_dict()) + "\n")


def read_jsonl(path: str | Path) -> list[TurnRecord]:
    names = {f.name for f in dataclasses.fields(TurnRecord)}
    with open(path, encoding="utf-8") as fh:
        return [TurnRecord(**{k: v for k, v in json.loads(line).items() if k in names})
                for line in fh if line.strip()]


@dataclass
class QueueSample:
    """Scheduler.Stats at one instant (t: seconds from the replay start)."""
    t: float
    ready: int
    preparing: int
    running: int
