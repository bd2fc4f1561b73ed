"""How a worker's start ends when it cannot serve, as a user sees it: a wrong --model is refused
before Ray starts, one line naming the flag (it was the engine actor's 59-line traceback after
Ray's start); an engine that dies while it starts is one last line saying why; a worker whose
actor waits for room on its Ray cluster stops on SIGTERM (it waited without end)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import shutil
import signal
import sys
import tempfile
import time

import pytest

from compute_worker.loaders.model_source import model_source
from tests.shared_ray import OWN_RAY


def test_model_source_names_what_a_spec_holds(tmp_path):
    assert model_source("smollm2-135m") is None
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(20))
    assert model_source(str(gguf)) == gguf
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert model_source(str(hf)) == hf


@pytest.mark.parametrize("make, error", [
    (lambda d: d / "missing.gguf", "no such file or directory"),
    (lambda d: d, "a directory without config.json"),
    (lambda d: (d / "junk.gguf").write_bytes(b"\x00" * 64) and d / "junk.gguf", "not a GGUF file"),
    (lambda d: (d / "m.bin").write_bytes(b"GGUF" + bytes(20)) and d / "m.bin", "not a GGUF file"),
])
def test_a_spec_that_names_no_model_is_refused(tmp_path, make, error):
    with pytest.raises(ValueError, match=error):
        model_source(str(make(tmp_path)))


ROOT = pathlib.Path(__file__).parent.parent
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", **OWN_RAY}
WORKER = [sys.executable, "-m", "services.cli.main", "serve", "worker", "--listen", "127.0.0.1:0",
          "--insecure-no-auth", "true"]


def test_serve_worker_refuses_a_wrong_model_in_one_line_before_ray(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(os.urandom(5000))
    out = subprocess.run([*WORKER, "--model", str(junk)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=ENV)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        f"bidaw serve worker: --model {junk}: not a GGUF file (expected a .gguf file starting "
        "with b'GGUF')")
    assert "Traceback" not in out.stderr and "Started a local Ray" not in out.stderr


def test_an_engine_that_dies_while_it_starts_is_one_last_line():
    # no such device here, with or without CUDA: the actor fails while it loads the model
    out = subprocess.run([*WORKER, "--device", "cuda:99"], capture_output=True, text=True,
                         timeout=180, cwd=ROOT, env=ENV)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("bidaw serve worker: the engine did not start: "), out.stderr[-3000:]
    assert "CUDA" in last or "cuda" in last or "device" in last, last


CPULESS_RAY = """
import ray, sys, time
ray.init(num_cpus=0, include_dashboard=False, object_store_memory=80 << 20,
         _temp_dir=sys.argv[1])
print(ray.get_runtime_context().gcs_address, flush=True)
time.sleep(600)
"""


def test_a_worker_waiting_for_room_on_its_ray_stops_on_sigterm(tmp_path):
    ray_dir = tempfile.mkdtemp(prefix="rz-", dir="/tmp")  # short: Ray's socket paths
    head = subprocess.Popen([sys.executable, "-c", CPULESS_RAY, ray_dir], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    worker = None
    try:
        address = head.stdout.readline().strip()
        assert address, "the CPU-less Ray did not start"
        log = tmp_path / "worker.log"
        worker = subprocess.Popen([*WORKER, "--ray-address", address], cwd=ROOT, env=ENV,
                                  stdout=subprocess.DEVNULL, stderr=log.open("w"))
        deadline = time.monotonic() + 60  # until it has joined and asked for its actor
        while "Connected to Ray cluster" not in log.read_text() and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()
            time.sleep(0.2)
        time.sleep(3)
        assert worker.poll() is None  # the actor needs a CPU the cluster does not have
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert "stopped before the engine started" in log.read_text()
    finally:
        for proc in (worker, head):
            if proc is not None and proc.poll() is None:
                proc.terminate()  # the head's Ray stops with its driver (ray.init: SIGTERM)
                proc.wait(timeout=60)
        shutil.rmtree(ray_dir, ignore_errors=True)
