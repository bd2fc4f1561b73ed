"""A real redis-server for tests: started on a free port in a temporary directory, no persistence
of its own (the store's durable state is its SSD files; Redis holds the index)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from typing import Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server(workdir) -> Iterator[str]:
    """Yields the server's redis:// URL; stops the server afterwards."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                             str(workdir), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def redis_url(tmp_path):
    """A fresh redis-server for one test (import this fixture into the test module)."""
    (tmp_path / "redis").mkdir()
    with redis_server(tmp_path / "redis") as url:
        yield url
