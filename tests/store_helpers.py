"""Helpers of the KV store tests: verifiable KV bytes, an Awareness stream client, polling."""
from __future__ import annotations

import queue
import struct
import threading
import time

import grpc

from services.runtime.gen import kv_store_pb2

BPT = 4096


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
