"""The paper's format: a header line, then `user_id time_stamp query_length response_length round_index`."""
from __future__ import annotations

from pathlib import Path

from bench.traces.turn import Turn


def load_bidaw(path: str | Path) -> list[Turn]:
    turns: list[Turn] = []
    with open(path, "r", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 5 or not parts[0].lstrip("-").isdigit():
                continue  # the header, or a blank line
            user, ts, q, a, rnd = parts[:5]
            turns.append(Turn(int(user), float(ts), int(q), int(a), int(rnd)))
    turns.sort(key=lambda t: t.time)  # stable: keeps file order among equal timestamps
    return turns


def write_bidaw(turns: list[Turn], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("user_id time_stamp(seconds) query_length response_length round_index\n")
        for t in turns:
            ts = int(t.time) if float(t.time).is_integer() else round(t.time, 3)
            f.write(f"{t.user} {ts} {t.query_len} {t.answer_len} {t.round}\n")
