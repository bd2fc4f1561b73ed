"""The one record every trace format is turned into."""
from __future__ import annotations

from typing import NamedTuple


class Turn(NamedTuple):
    """One request of a conversation. A NamedTuple: a million of them stay cheap."""

    user: int          # session / user id
    time: float        # arrival, seconds from the trace start
    query_len: int     # tokens of the new user message
    answer_len: int    # tokens of the model's answer
    round: int         # 0-based index of the turn within its session
