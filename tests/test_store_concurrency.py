"""Concurrent readers and writers on one store, over both data paths, with evictions,
promotions and asynchronous SSD copies under way: every read returns bytes that match the token
ids it returns, and every session ends as its last write left it."""
from __future__ import annotations

import random
import threading
import time

import grpc

from compute_worker.kv_client import KVClient
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import BPT, token_bytes

KV = common_pb2.KV_FORMAT_KV
WRITERS, READERS, SESSIONS = 3, 3, 3


def test_concurrent_readers_and_writers(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=1 << 20, eviction="lru", promote_concurrency=2))
    target = f"127.0.0.1:{server.port}"
    names = [[f"w{w}-{i}" for i in range(SESSIONS)] for w in range(WRITERS)]
    final: dict[str, list[int]] = {}
    errors: list[str] = []
    stop = threading.Event()
    reads = [0]

    def write(w: int) -> None:
        client = KVClient(target, shared_memory=w % 2 == 0)  # both data paths
        rng = random.Random(w)
        state = {sid: [] for sid in names[w]}
        try:
            while not stop.is_set():
                sid = rng.choice(names[w])
                have = state[sid]
                start_token = len(have) if not have or rng.random() > 0.25 else \
                    rng.randrange(len(have))
                after = have[:start_token] + [rng.randrange(1000) for _ in
                                              range(rng.randrange(4, 40))]
                client.write(sid, start_token, after[start_token:], KV, BPT, "m",
                             token_bytes(sid, after)[start_token * BPT:],
                             durable=rng.random() < 0.5)
                state[sid] = after
        except grpc.RpcError as exc:
            errors.append(f"writer {w}: {exc.code()} {exc.details()}")
        final.update(state)

    def read(r: int) -> None:
        client = KVClient(target, shared_memory=r % 2 == 1)
        rng = random.Random(100 + r)
        while not stop.is_set():
            sid = rng.choice(rng.choice(names))
            try:
                if rng.random() < 0.2:
                    client.stub.Promote(kv_store_pb2.PromoteRequest(session_id=sid))
                got = client.read(sid, max_tokens=rng.choice([0, 0, 10]))
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:  # not written yet
                    errors.append(f"reader {r}: {exc.code()} {exc.details()}")
                continue
            if got.data != token_bytes(sid, got.token_ids):
                errors.append(f"reader {r}: bytes of {sid} do not match its tokens")
            reads[0] += 1

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    threads += [threading.Thread(target=read, args=(r,)) for r in range(READERS)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    try:
        assert not errors, errors[:5]
        assert reads[0] > 20
        client = KVClient(target)
        for sid, tokens in final.items():
            if tokens:
                got = client.read(sid)
                assert got.token_ids == tokens and got.data == token_bytes(sid, tokens), sid
        stats = core.stats()
        assert stats["dram_evictions"] > 0 and stats["ssd_hits"] > 0
        assert stats["dram_bytes"] <= stats["dram_capacity"]
    finally:
        server.stop(0)
        core.close()
