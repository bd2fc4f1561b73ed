"""`bidaw up` as a user runs it: a service killed with -9 is restarted and the restart is printed
(one line, no traceback); SIGTERM then stops every process it started, Ray's included."""
from __future__ import annotations

import os
import pathlib
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from bench.chaos.procs import descendants, find_descendant
from services.launch.launcher import free_port
from tests.shared_ray import OWN_RAY


def _lines(proc) -> queue.Queue:
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [q.put(line) for line in proc.stdout], daemon=True).start()
    return q


def _wait_for(q: queue.Queue, text: str, timeout: float, seen: list[str]) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in seen):
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} not printed; got:\n{''.join(seen)}"
        try:
            seen.append(q.get(timeout=left))
        except queue.Empty:
            pass


def _running(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_up_restarts_a_killed_service_and_sigterm_stops_everything(tmp_path):
    ports = [str(free_port()) for _ in range(4)]
    up = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(tmp_path), "--port",
         ports[0], "--store-port", ports[1], "--scheduler-port", ports[2], "--worker-port",
         ports[3], "--dram-bytes", "64MiB"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "RAY_AUTH_MODE": "disabled", **OWN_RAY})  # as users run it
    seen: list[str] = []
    try:
        q = _lines(up)
        _wait_for(q, "Ctrl-C to stop", 300, seen)
        gateway = find_descendant(up.pid, "serve gateway")
        assert gateway is not None
        os.kill(gateway, signal.SIGKILL)
        _wait_for(q, "[supervisor] gateway restarted", 60, seen)
        assert any(line.startswith("[supervisor] gateway killed by SIGKILL") for line in seen)
        started = descendants(up.pid)
        assert len(started) >= 5  # four services and the worker's Ray
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=120) == 0
        time.sleep(1.0)
        alive = [p for p in started if _running(p)]
        assert alive == [], f"left running after SIGTERM: {alive}"
        assert "Traceback" not in "".join(seen)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def test_a_started_deployment_is_entered_without_a_second_start(tmp_path):
    """`with dep.start(...)` used to start every service twice (the copies crash-looped on
    their ports under the supervisor)."""
    from services.launch.launcher import LocalDeployment
    from services.launch.service_process import ServiceProcess

    dep = LocalDeployment(data_dir=str(tmp_path), supervise=False)
    dep.services["store"] = ServiceProcess("store", "store", [], "127.0.0.1", 1, tmp_path / "l")
    assert dep.__enter__() is dep and list(dep.services) == ["store"]
    with pytest.raises(RuntimeError, match="already started"):
        dep.start()


LAUNCHER = """
import sys, time
from tests.cluster import ServiceProcess
store = ServiceProcess("store", sys.argv[1], "--data-dir", sys.argv[1] + "/kv",
                       "--dram-bytes", "8MiB", "--ssd-bytes", "64MiB").wait()
print(store.proc.pid, flush=True)
time.sleep(600)
"""


def test_services_stop_when_their_launcher_is_killed(tmp_path):
    """kill -9 of `bidaw up` (or of any launcher) used to leave its services running,
    unsupervised, on their ports; the next `bidaw up` on those ports then met them there."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True,
                                cwd=pathlib.Path(__file__).parent.parent)
    store_pid = int(launcher.stdout.readline())
    try:
        assert _running(store_pid)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 30
        while _running(store_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        logs = "".join(f.read_text(errors="replace")[-2000:] for f in tmp_path.glob("store-*.log"))
        assert not _running(store_pid), f"the store outlived its launcher; its log:\n{logs}"
    finally:
        launcher.kill()
        if _running(store_pid):  # failed: leave no store behind on its port
            os.kill(store_pid, signal.SIGKILL)


def test_up_on_ports_in_use_says_so_and_starts_nothing(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        up = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(tmp_path),
             "--scheduler-port", str(port)], capture_output=True, text=True, timeout=60,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert up.returncode == 1
    assert f"bidaw up: port {port} (scheduler) on 127.0.0.1 in use" in up.stderr, up.stderr
    assert "Traceback" not in up.stderr and not (tmp_path / "logs").exists()


def test_up_on_a_data_dir_that_cannot_be_one_says_so(tmp_path):
    (tmp_path / "data").write_text("a file")
    up = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert up.returncode == 1
    assert up.stderr.strip() == \
        f"bidaw up: --data-dir {tmp_path / 'data'}: exists and is not a directory", up.stderr
