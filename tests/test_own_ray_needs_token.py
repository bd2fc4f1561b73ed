"""A worker's own Ray cluster answers no one without its token. Ray listens on every interface,
and a caller it lets in runs any code as the worker's user: a worker that starts its own Ray
(no --ray-address) keeps it on loopback, turns on Ray's token authentication with a token made at
start, kept in its environment only, and closes Ray's temporary directory to other users. A real
Ray: its GCS port refuses a connection on the machine's own address (as from another host),
and a Ray client on loopback is refused without a token and with a wrong one."""
from __future__ import annotations

import os
import pathlib
import socket
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
OWNER = """
import os, sys
from compute_worker.config import WorkerConfig
from compute_worker import main
main.init_ray(WorkerConfig(ray_num_cpus=1, ray_object_store_bytes=80 << 20))
import ray
import psutil  # (Ray's own copy, on the path once Ray is imported)
ray.get(ray.remote(lambda: 1).remote())  # a Ray worker process listens too
tree = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
bound = {c.laddr.ip for c in psutil.net_connections("tcp") if c.status == "LISTEN"
         and c.pid in tree}
print(ray.get_runtime_context().gcs_address, main._ray_temp_dir, os.environ["RAY_AUTH_TOKEN"],
      ",".join(sorted(bound)), flush=True)
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
# A caller on this machine, as the worker's own Ray sees itself (else the probe looks for a
# raylet on the machine's address, and waits)
LOCAL = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


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
        gcs, temp_dir, token, bound = owner.stdout.readline().split()
        # on loopback only: the GCS, the raylet, the workers and the autoscaler's metrics port
        # (which asks no token) listen on no other interface
        assert set(bound.split(",")) <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, bound
        assert gcs.startswith("127.0.0.1:"), gcs
        # Ray's folder is inside one that was never open to others (Ray opens its own to all)
        assert stat.S_IMODE(os.stat(temp_dir).st_mode) == 0o700
        assert list((pathlib.Path(temp_dir) / "r").glob("session_*"))
        assert len(token) == 64 and not (pathlib.Path.home() / ".ray" / "auth_token").exists()
        machine = _machine_address()
        if machine != "127.0.0.1":  # from another host: nothing is there
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((machine, int(gcs.rsplit(":", 1)[1])), timeout=10)
        probe = lambda auth: subprocess.run(  # noqa: E731
            [sys.executable, "-c", PROBE, gcs], cwd=ROOT, text=True, capture_output=True,
            timeout=120, env={**env, **auth, **PROBE_TRIES, **LOCAL})
        for auth in ({"RAY_AUTH_MODE": "disabled"},
                     {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}):
            refused = probe(auth)
            assert refused.returncode != 0 and "ran:" not in refused.stdout, auth
            assert "auth" in refused.stderr.lower(), refused.stderr[-2000:]
        assert "ran: 1" in probe({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}).stdout
        for path in pathlib.Path(temp_dir).rglob("*"):  # Ray's logs and session files
            if path.is_file() and not path.is_socket():
                assert token.encode() not in path.read_bytes(), path
    finally:
        owner.communicate("\n", timeout=60)
    assert owner.returncode == 0
    assert not os.path.exists(temp_dir)
