"""Helpers of the KV store tests: store servers with clients (the `store` fixture), verifiable
KV bytes, an Awareness stream client, polling."""
from __future__ import annotations

import pathlib
import queue
import struct
import threading
import time

import grpc
import pytest

from compute_worker.kv_client import KVClient
from kv_store.config import StoreConfig
from kv_store.main import start
from kv_store.store import KVStore
from services.runtime.gen import kv_store_pb2

BPT = 4096


class Stores:
    """Store servers over one data directory (what a restart or a second replica sees), each
    with a client; `defaults` are the StoreConfig fields each gets unless the call says else."""

    def __init__(self, data_dir: pathlib.Path, **defaults):
        self.data_dir = data_dir
        self.defaults = defaults
        self._made: list[tuple[object, KVStore]] = []

    def __call__(self, **fields) -> tuple[KVClient, KVStore]:
        config = StoreConfig(listen="127.0.0.1:0", data_dir=str(self.data_dir),
                             **{**self.defaults, **fields})
        server, core = start(config)
        self._made.append((server, core))
        return KVClient(f"127.0.0.1:{server.port}"), core

    def stop(self, core: KVStore) -> None:
        """Stop one store (a restart over the same directory may follow)."""
        for server, c in list(self._made):
            if c is core:
                server.stop(0)
                c.close()
                self._made.remove((server, c))

    def close(self) -> None:
        for _, core in list(self._made):
            self.stop(core)


@pytest.fixture
def store(tmp_path, request):
    """Stores over tmp_path/ssd with the test module's STORE_DEFAULTS (a dict, if it has one)."""
    stores = Stores(tmp_path / "ssd", **getattr(request.module, "STORE_DEFAULTS", {}))
    yield stores
    stores.close()


def token_bytes(session: str, tokens: list[int], bpt: int = BPT) -> bytes:
    """The KV a token stands for: a function of (session, position, token id), so any bytes a
    read returns can be checked against the token ids it returns."""
    tag = sum(session.encode())
    return b"".join((struct.pack("<III", tag, p, v) * (bpt // 12 + 1))[:bpt]
                    for p, v in enumerate(tokens))


def eventually(check, timeout: float = 10.0, every: float = 0.02):
    """Poll `check` until it returns something true; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


class AwarenessStream:
    """The compute side of one Awareness stream: `send` events in, `events` out."""

    def __init__(self, stub):
        self._out: queue.Queue = queue.Queue()
        self.events: queue.Queue = queue.Queue()
        self.call = stub.Awareness(iter(self._out.get, None))
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()
        self.send(hello=kv_store_pb2.Hello(client_id="test"))

    def _read(self) -> None:
        try:
            for event in self.call:
                self.events.put(event)
        except grpc.RpcError:
            pass

    def send(self, **kind) -> None:
        self._out.put(kv_store_pb2.ComputeEvent(**kind))

    def next(self, kind: str, timeout: float = 10.0, where=lambda e: True):
        """The next store event of `kind` (snapshot, location, load_finished) matching `where`."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(deadline - time.monotonic(), 0.001))
            if event.WhichOneof("kind") == kind and where(getattr(event, kind)):
                return getattr(event, kind)

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()
