"""The lines of an interactive `bidaw chat`, and the moment the user starts typing each.

A chat front end knows before the server does that a conversation will go on: its user starts
typing. On a terminal, `bidaw chat` reads each message's first key alone (non-canonical mode),
calls `on_typing` at once on a thread (the user never waits for the network) and reads the rest
of the line with readline, that key already in it. The chat uses the moment to ask the
deployment to bring the session's KV from SSD back to DRAM while the user types
(POST /v1/sessions/{id}/prepare). Off a terminal nothing is typed, so there is no such moment.
"""
from __future__ import annotations

import os
import select
import sys
import termios
import threading
from typing import Callable, Iterator

ESC, EOT = 0x1B, 0x04  # an escape sequence (arrow keys...) begins; Ctrl-D
TYPED_AHEAD_EOF = 0x00  # a Ctrl-D typed while the answer printed reads back as a NUL
SEQUENCE_GAP_S = 0.03  # the bytes of one key's escape sequence arrive together


def typed_lines(on_typing: Callable[[], None]) -> Iterator[str]:
    """Lines typed on this process's terminal (stdin and stdout), without their newline; an
    empty line for Enter alone; ends at Ctrl-D. `on_typing` runs on its own thread at each
    line's first key; what it raises is ignored (it is a hint)."""
    fd = sys.stdin.fileno()
    while True:
        first = _first_key(fd)
        if first is None:
            return
        if first == "\n":
            yield ""
            continue
        threading.Thread(target=_quietly, args=(on_typing,), daemon=True).start()
        try:
            line = _rest_of_line(first)
        except EOFError:
            return
        yield line


def _rest_of_line(first: str) -> str:
    """The line whose first key was `first`: with readline, that key is put back into the line
    being edited; a Python without readline echoes it and reads on (it can no longer be erased)."""
    try:
        import readline
    except ImportError:
        print(first, end="", flush=True)
        return first + input()
    readline.set_startup_hook(lambda: readline.insert_text(first))
    try:
        return input()
    finally:
        readline.set_startup_hook(None)


def _first_key(fd: int) -> str | None:
    """The text of the next key ("" for one that types nothing, "\\n" for Enter), or None
    for Ctrl-D. The terminal's own settings are back when this returns or raises."""
    saved = termios.tcgetattr(fd)
    raw = list(saved)
    raw[3] &= ~(termios.ICANON | termios.ECHO)  # byte by byte; readline echoes it later
    raw[6] = list(saved[6])
    raw[6][termios.VMIN], raw[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, raw)  # not TCSAFLUSH: keep what was typed ahead
    try:
        key = os.read(fd, 1)
        if not key or key[0] in (EOT, TYPED_AHEAD_EOF):
            return None
        if key[0] == ESC:
            _drain(fd)
            return ""
        want = 1 + _continuation_bytes(key[0]) if key[0] >= 0xC0 else 1
        while len(key) < want:  # the rest of one UTF-8 character
            key += os.read(fd, want - len(key))
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
    text = key.decode("utf-8", "surrogateescape")  # chat refuses what is not UTF-8
    if text in ("\n", "\r"):
        return "\n"
    return text if text.isprintable() or text == "\t" else ""


def _continuation_bytes(lead: int) -> int:
    return 3 if lead >= 0xF0 else 2 if lead >= 0xE0 else 1


def _drain(fd: int) -> None:
    """Drop the rest of an escape sequence: readline would type it as text."""
    while select.select([fd], [], [], SEQUENCE_GAP_S)[0]:
        os.read(fd, 64)


def _quietly(call: Callable[[], None]) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 - a hint that failed changes nothing for the turn
        pass
