"""`bidaw chaos` where redis-server is missing reports that fault as not run (and runs the
others); the service-crash fault: every service of a supervised deployment killed with -9 comes
back by itself, turns succeed, reuse returns within 30 s of the store's crash."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.chaos.reference import Reference
from bench.chaos.runner import run_fault


@pytest.fixture(scope="module")
def reference():
    return Reference()


def test_without_redis_server_the_fault_is_not_run(tmp_path):
    # A PATH with this Python but no redis-server: the real CLI, as a user without Redis runs it.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bindir)}
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "chaos", "--faults",
                          "redis-restart", "--fuzz-examples", "0", "--turns", "2"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "redis-restart   not run: redis-server is not installed" in out.stdout
    assert "Traceback" not in out.stderr


def test_service_crash_heals_every_service(reference, tmp_path):
    result = run_fault("service-crash", turns=8, reference=reference, workdir=str(tmp_path))
    assert result["problems"] == []
    assert result["injected"] == 4
    assert result["turns"] == 8 and result["wrong_answers"] == 0
    assert result["lost_acknowledged_kv"] == 0 and result["errors"] == 0
    checks = result["checks"]
    assert checks["restarts"] == {"store": 1, "worker": 1, "scheduler": 1, "gateway": 1}
    assert checks["store_reuse_s"] <= 30.0
