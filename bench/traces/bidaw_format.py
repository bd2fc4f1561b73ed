"""The paper's format: a header line, then `user_id time_stamp query_length response_length round_index`."""
from __future__ import annotations

from pathlib import Path

from bench.traces.turn import TraceError, Turn, checked_turn, text_lines

COLUMNS = "user_id time_stamp query_length response_length round_index"


def load_bidaw(path: str | Path) -> list[Turn]:
    turns: list[Turn] = []
    seen_line = False
    for n, line in text_lines(path):
        parts = line.split()
        if not parts:
            continue
        first, seen_line = not seen_line, True
        if first and not parts[0].lstrip("-").isdigit():
            continue  # the header
        if len(parts) < 5:
            raise TraceError(path, n, f"{len(parts)} fields; the format is `{COLUMNS}`")
        try:
            user, ts, q, a, rnd = parts[:5]
            turns.append(checked_turn(int(user), float(ts), int(q), int(a), int(rnd)))
        except ValueError as exc:
            raise TraceError(path, n, f"{exc} (the format is `{COLUMNS}`)") from None
    turns.sort(key=lambda t: t.time)  # stable: keeps file order among equal timestamps
    return turns


def write_bidaw(turns: list[Turn], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("user_id time_stamp(seconds) query_length response_length round_index\n")
        for t in turns:
            ts = int(t.time) if float(t.time).is_integer() else round(t.time, 3)
            f.write(f"{t.user} {ts} {t.query_len} {t.answer_len} {t.round}\n")
