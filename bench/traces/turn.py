"""The one record every trace format is turned into, and how a bad record is refused."""
from __future__ import annotations

import json
import math
from typing import Any, NamedTuple

from services.runtime.limits import INT32_MAX

MAX_TOKENS = INT32_MAX  # a turn's token counts: anything larger is a broken file, not a chat


class Turn(NamedTuple):
    """One request of a conversation. A NamedTuple: a million of them stay cheap."""

    user: int          # session / user id
    time: float        # arrival, seconds from the trace start
    query_len: int     # tokens of the new user message
    answer_len: int    # tokens of the model's answer
    round: int         # 0-based index of the turn within its session


class TraceError(ValueError):
    """A trace file that cannot be read as its format: where, and why (one line)."""

    def __init__(self, path, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{reason}")


def checked_turn(user: int, time: float, query_len: int, answer_len: int, rnd: int) -> Turn:
    """A Turn whose values a replay can use; ValueError naming the first one that is not."""
    if not math.isfinite(time):
        raise ValueError(f"the time {time} is not a finite number")
    for name, value in (("query length", query_len), ("answer length", answer_len)):
        if not 0 <= value <= MAX_TOKENS:
            raise ValueError(f"the {name} {value} is outside [0, {MAX_TOKENS}]")
    if rnd < 0:
        raise ValueError(f"the round index {rnd} is negative")
    return Turn(user, time, query_len, answer_len, rnd)


def text_lines(path):
    """(line number, text) of a UTF-8 file, one line at a time; TraceError at a line that is
    not UTF-8 (the rest of the file is not read)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceError(path, n, f"not UTF-8 text (byte {exc.start + 1})") from None


def json_value(path, line: int | None, text: str) -> Any:
    """`text` parsed as JSON; TraceError at `line` (None: the whole file) if it does not parse."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TraceError(path, line, "JSON nested too deep") from None
    except ValueError as exc:
        raise TraceError(path, line, f"not JSON: {exc}") from None
