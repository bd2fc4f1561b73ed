"""The restart policy (pure) and the supervisor over real processes: a killed process is reaped
and started again after the backoff; one that keeps dying fast is given up on."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import time

from services.launch.supervisor import Backoff, RestartPolicy, Supervisor

POLICY = RestartPolicy(first_delay_s=0.1, max_delay_s=0.4, healthy_s=10.0, max_failures=3)


def test_backoff_doubles_to_its_cap_then_gives_up():
    b = Backoff(POLICY)
    assert [b.on_exit(0.5) for _ in range(4)] == [0.1, 0.2, 0.4, None]


def test_a_healthy_run_resets_the_backoff():
    b = Backoff(POLICY)
    assert b.on_exit(1.0) == 0.1 and b.on_exit(1.0) == 0.2
    assert b.on_exit(10.0) == 0.1  # it ran healthy_s: starts over
    assert b.on_exit(1.0) == 0.2


def _until(check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_killed_process_is_reaped_and_restarted():
    lines: list[str] = []
    launched: list[subprocess.Popen] = []

    def launch(name):
        launched.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                         start_new_session=True))
        return launched[-1]
    sup = Supervisor(launch, POLICY, lines.append, poll_s=0.02)
    sup.watch("svc", launch("svc"))
    sup.start()
    try:
        first = launched[0]
        first.kill()
        _until(lambda: len(launched) == 2)
        assert first.returncode is not None  # reaped: no zombie left
        assert not pathlib.Path(f"/proc/{first.pid}").exists()
        assert lines[0].startswith("svc killed by SIGKILL after")
        assert lines[1].startswith(f"svc restarted (pid {launched[1].pid}, restart 1)")
        assert launched[1].poll() is None and sup.restarts == {"svc": 1}
    finally:
        sup.stop()
        for p in launched:
            p.kill()
            p.wait()


def test_a_process_that_keeps_dying_is_given_up_on():
    lines: list[str] = []
    launched: list[subprocess.Popen] = []

    def launch(name):
        launched.append(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]))
        return launched[-1]
    sup = Supervisor(launch, POLICY, lines.append, poll_s=0.02)
    sup.watch("bad", launch("bad"))
    sup.start()
    try:
        _until(lambda: "bad" in sup.given_up)
        assert len(launched) == 1 + POLICY.max_failures
        assert lines[-1].startswith("bad exited with status 3") and "giving up" in lines[-1]
        time.sleep(0.5)
        assert len(launched) == 1 + POLICY.max_failures  # and it stays given up
    finally:
        sup.stop()


def test_stopped_supervisor_restarts_nothing():
    launched: list[subprocess.Popen] = []

    def launch(name):
        launched.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return launched[-1]
    sup = Supervisor(launch, POLICY, poll_s=0.02)
    sup.watch("svc", launch("svc"))
    sup.start()
    sup.stop()
    launched[0].kill()
    launched[0].wait()
    time.sleep(0.5)
    assert len(launched) == 1


def test_a_run_is_measured_from_the_process_start_not_from_when_it_was_watched():
    # A deployment watches its services only once all are ready: the store started first may
    # have run a while by then. This one ran ~2.5 s, only ~0.8 s of it watched.
    lines: list[str] = []
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    sup = Supervisor(lambda name: subprocess.Popen(["sleep", "60"], start_new_session=True),
                     RestartPolicy(first_delay_s=30.0), lines.append, poll_s=0.02)
    try:
        time.sleep(1.7)
        sup.watch("store", proc)
        sup.start()
        time.sleep(0.8)
        proc.kill()
        _until(lambda: lines)
        assert lines[0].startswith("store killed by SIGKILL after"), lines
        ran = float(lines[0].split(" after ")[1].split(" s")[0])
        assert 2.3 <= ran <= 3.2, lines[0]
    finally:
        sup.stop()
        proc.kill()
        proc.wait()
