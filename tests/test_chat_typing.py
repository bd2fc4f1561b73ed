"""`bidaw chat` on a terminal says when its user starts typing the next message: the first key
sends POST /v1/sessions/{id}/prepare before the line is finished, and the key stays in the
message. Real processes: the `bidaw` CLI on a real pseudo-terminal, a real gateway and a gRPC
scheduler (the fake one, no model)."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from tests.fake_scheduler import gateway_over_fake
from tests.store_helpers import eventually

KEY = "sk-typing-test-1"


@pytest.fixture(scope="module")
def stack():
    with gateway_over_fake(f"t1:{KEY}") as (_, fake, gw):
        yield fake, gw


class Terminal:
    """`bidaw chat` with a pseudo-terminal as its stdin, stdout and stderr."""

    def __init__(self, gw, session: str, *flags: str, env: dict | None = None):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "chat", "--target",
             f"http://127.0.0.1:{gw.port}/v1", "--api-key", KEY, "--session", session, *flags],
            stdin=slave, stdout=slave, stderr=slave, close_fds=True,
            env={**os.environ, **(env or {})})
        os.close(slave)
        self.seen = b""

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait_for(self, text: bytes, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while text not in self.seen:
            assert time.monotonic() < end, f"no {text!r} on the terminal: {self.seen!r}"
            if select.select([self.master], [], [], 0.1)[0]:
                self.seen += os.read(self.master, 4096)

    def close(self) -> int:
        self.type(b"\x04")  # Ctrl-D on an empty line
        code = self.proc.wait(timeout=30)
        os.close(self.master)
        return code


def talked_once(gw, session: str, *flags: str, env: dict | None = None) -> Terminal:
    """`bidaw chat` on a terminal, its first message ("one") answered."""
    term = Terminal(gw, session, *flags, env=env)
    term.type(b"one\n")
    term.wait_for(b"[KV from")
    return term


def prepared(fake, session: str) -> bool:
    return ("t1", f"t1/{session}") in fake.prepared


def test_the_first_key_of_a_later_message_prepares_the_session_and_stays_in_it(stack):
    fake, gw = stack
    term = talked_once(gw, "typing-1")
    assert b"Ctrl-D to quit" in term.seen and b"echo: one" in term.seen
    asked = len(fake.requests)
    assert not prepared(fake, "typing-1")  # a first message has nothing to prepare
    term.type("é".encode())  # one key, a two-byte character: the line is not finished
    assert eventually(lambda: prepared(fake, "typing-1")), fake.prepared
    assert len(fake.requests) == asked  # said before the message was sent
    term.type(b"t\x1b[A\x1b[B encore\n")  # up and down arrows: history, and back
    term.wait_for("echo: ét encore".encode())
    assert [m.content for m in fake.requests[-1].messages][-1] == "ét encore"
    assert term.close() == 0


def test_an_arrow_key_first_prepares_without_typing_its_bytes(stack):
    fake, gw = stack
    term = talked_once(gw, "typing-2")
    term.type(b"\x1b[D")  # left arrow: the user is at the keyboard, nothing is typed
    assert eventually(lambda: prepared(fake, "typing-2")), fake.prepared
    term.type(b"two\n")
    term.wait_for(b"echo: two")
    assert fake.requests[-1].messages[-1].content == "two"
    assert term.close() == 0


def test_no_prepare_keeps_the_typing_to_itself(stack):
    fake, gw = stack
    term = talked_once(gw, "typing-3", "--no-prepare")
    term.type(b"two\n")
    term.wait_for(b"echo: two")
    assert term.close() == 0
    assert not prepared(fake, "typing-3")


def test_enter_alone_still_quits(stack):
    _, gw = stack
    term = talked_once(gw, "typing-4")
    term.type(b"\n")
    assert term.proc.wait(timeout=30) == 0
    os.close(term.master)


def test_a_python_without_readline_keeps_the_first_key_too(stack, tmp_path):
    fake, gw = stack
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["readline"] = None\n')
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    term = talked_once(gw, "typing-5", env={"PYTHONPATH": path})
    term.type(b"t")
    assert eventually(lambda: prepared(fake, "typing-5")), fake.prepared
    term.type(b"wo\n")
    term.wait_for(b"echo: two")
    assert fake.requests[-1].messages[-1].content == "two"
    assert term.close() == 0
