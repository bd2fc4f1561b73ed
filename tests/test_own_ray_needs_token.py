"""A worker's own Ray cluster answers no one without its token. Ray listens on every interface,
and a caller it lets in runs any code as the worker's user: a worker that starts its own Ray
(no --ray-address) turns on Ray's token authentication with a token made at start, kept in its
environment only, and closes Ray's temporary directory to other users. A real Ray, probed from
another process on the machine's own address (not loopback), without a token and with a wrong
one, as a program on another host would."""
from __future__ import annotations

import os
import pathlib
import socket
import stat
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent
OWNER = """
import os, sys
from compute_worker.config import WorkerConfig
from compute_worker import main
main.init_ray(WorkerConfig(ray_num_cpus=1, ray_object_store_bytes=80 << 20))
import ray
print(ray.get_runtime_context().gcs_address, main._ray_temp_dir, os.environ["RAY_AUTH_TOKEN"],
      flush=True)
sys.stdin.readline()
main.shutdown_ray()
"""
PROBE = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
print("ran:", ray.get(ray.remote(lambda: 1).remote(), timeout=30))
"""

# ray.init tries the GCS 20 times a second apart before giving up (~20 s a refused probe);
# Ray's own override of that count: a refusal is an answer, the first try already gets it.
PROBE_TRIES = {"RAY_gcs_server_port_wait_time_s": "3"}


def _machine_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: it picks the outgoing interface
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def test_a_workers_own_ray_refuses_callers_without_its_token():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**env, "RAY_AUTH_MODE": "disabled"})  # as the launcher sets
    try:
        gcs, temp_dir, token = owner.stdout.readline().split()
        # Ray's folder is inside one that was never open to others (Ray opens its own to all)
        assert stat.S_IMODE(os.stat(temp_dir).st_mode) == 0o700
        assert list((pathlib.Path(temp_dir) / "r").glob("session_*"))
        assert len(token) == 64 and not (pathlib.Path.home() / ".ray" / "auth_token").exists()
        target = f"{_machine_address()}:{gcs.rsplit(':', 1)[1]}"
        for auth in ({"RAY_AUTH_MODE": "disabled"},
                     {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}):
            probe = subprocess.run([sys.executable, "-c", PROBE, target], cwd=ROOT, text=True,
                                   capture_output=True, timeout=120,
                                   env={**env, **auth, **PROBE_TRIES})
            assert probe.returncode != 0 and "ran:" not in probe.stdout, auth
            assert "Failed to connect" in probe.stderr or "auth" in probe.stderr.lower()
        for path in pathlib.Path(temp_dir).rglob("*"):  # Ray's logs and session files
            if path.is_file() and not path.is_socket():
                assert token.encode() not in path.read_bytes(), path
    finally:
        owner.communicate("\n", timeout=60)
    assert owner.returncode == 0
    assert not os.path.exists(temp_dir)
