"""`bidaw bench store`: the KV store's data paths, each beside its baseline in the same run.

- ssd_read_vs_raw: loading a whole session from the SSD tier into DRAM (aligned reads, four in
  flight, checksums verified, into a shared-memory region) over a plain O_DIRECT sequential read
  of a file of the same size on the same disk, `--io-mb` per read, nothing kept or checked (the
  faster of one read at a time, as dd does, and four at a time); the median over repetitions of
  each size, and the lowest of those.
- shm_read_vs_memcpy: a worker process on the same machine reading a DRAM session through shared
  memory (two control RPCs and one copy) over copying the same bytes in its own memory.
- grpc_read_gbps: the same worker reading the same session over the chunked gRPC stream.
- write_amplification: bytes written to the SSD tier / KV bytes clients wrote, over a multi-turn
  workload where each turn replaces the last stored token (as the worker's re-tokenised prompts do).
- evict_decision_ms_p50: the default eviction policy picking a victim (victim + remove + admit)
  among 100,000 sessions, with leased sessions excluded as the store does.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from services.runtime.arg_types import positive_int, positive_int_list

MIB = 1 << 20


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = groups["bench"].add_parser(
        "store", help="KV store data paths vs their baselines (SSD, shared memory, gRPC)",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: "
                   "a temporary directory)")
    p.add_argument("--sizes-mb", type=positive_int_list, default=[64, 256, 512],
                   help="session sizes for the SSD figure (comma list)")
    p.add_argument("--io-mb", type=positive_int, default=8, help="bytes per read, raw and tier")
    p.add_argument("--shm-mb", type=positive_int, default=128,
                   help="session size for the DRAM figures")
    p.add_argument("--reps", type=positive_int, default=5, help="repetitions of each measurement")
    p.add_argument("--sessions", type=positive_int, default=100_000,
                   help="sessions for the eviction time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _say(args, msg: str) -> None:
    if not args.json:
        print(msg, file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    root = tempfile.mkdtemp(prefix="bidaw-bench-store-", dir=args.dir)
    try:
        sizes = args.sizes_mb
        _say(args, f"SSD tier vs raw O_DIRECT reads at {sizes} MB ...")
        ssd = ssd_read_vs_raw(os.path.join(root, "ssd"), sizes, args.io_mb, args.reps)
        _say(args, f"DRAM tier: shared memory and gRPC reads of {args.shm_mb} MB ...")
        dram = dram_reads(os.path.join(root, "dram"), args.shm_mb, args.reps)
        _say(args, "write amplification ...")
        wa = write_amplification(os.path.join(root, "wa"))
        _say(args, f"eviction decisions at {args.sessions} sessions ...")
        evict = evict_decision(args.sessions)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {"ssd_read_vs_raw": round(ssd["ratio"], 3),
           "shm_read_vs_memcpy": round(dram["shm_vs_memcpy"], 3),
           "grpc_read_gbps": round(dram["grpc_gbps"], 3),
           "write_amplification": round(wa["ratio"], 4),
           "evict_decision_ms_p50": round(evict["ms_p50"], 5),
           "detail": {"ssd": ssd["detail"], "dram": dram["detail"], "write": wa["detail"],
                      "evict": evict["detail"]}}
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            if key != "detail":
                print(f"{key:24s} {value}")
    return 0


# -- SSD tier vs raw reads ------------------------------------------------------------------

def _raw_read(path: str, io_bytes: int, depth: int = 1) -> float:
    """Seconds for a plain O_DIRECT sequential read of the whole file, no checks, `depth` reads
    in flight, each into its reader's own `io_bytes` buffer used over and over (depth 1 is
    `dd iflag=direct bs=... of=/dev/null`): the disk's pace, nothing kept."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from kv_store.tiers.aligned_io import DirectFile, aligned_buffer

    size = os.path.getsize(path)
    local = threading.local()

    def read(f: DirectFile, off: int) -> None:
        if not hasattr(local, "buf"):
            local.buf = aligned_buffer(io_bytes)
            local.buf[:] = bytes(io_bytes)  # touched: no page faults in the timed loop
        f.pread_into(memoryview(local.buf)[:min(io_bytes, size - off)], off)

    with ThreadPoolExecutor(depth) as pool, DirectFile(path, os.O_RDONLY) as f:
        list(pool.map(lambda _: read(f, 0), range(depth)))  # buffers made before timing
        start = time.perf_counter()
        list(pool.map(lambda off: read(f, off), range(0, size, io_bytes)))
        return time.perf_counter() - start


def ssd_read_vs_raw(folder: str, sizes_mb: list[int], io_mb: int, reps: int,
                    depth: int = 4) -> dict:
    from kv_store.config import StoreConfig
    from kv_store.store import KVStore

    os.makedirs(folder)
    store = KVStore(StoreConfig(data_dir=os.path.join(folder, "kv"), dram_bytes=max(sizes_mb) *
                                MIB + 64 * MIB, ssd_io_bytes=io_mb * MIB, ssd_read_depth=depth,
                                eviction="lru"))
    worst, detail = None, {}
    try:
        for size_mb in sizes_mb:
            sid = f"s{size_mb}"
            _write_turns(store, sid, size_mb * MIB, turns=8)
            length = store.ssd.file_bytes[sid]
            raw_path = os.path.join(folder, f"raw{size_mb}")  # same size, same disk
            _write_raw(raw_path, length)
            tier_s, raw_s, ratios = [], [], []
            for rep in range(reps + 1):  # interleaved: both see the same disk weather
                store.demote(sid)
                start = time.perf_counter()
                store.open_read(sid).release()  # the promotion path: SSD -> DRAM region
                tier_s.append(time.perf_counter() - start)
                assert sid in store.dram
                raw_s.append(min(_raw_read(raw_path, io_mb * MIB, 1),  # the better of one
                                 _raw_read(raw_path, io_mb * MIB, depth)))  # and many at once
                if rep == 0:  # a warm-up pair: threads started, code paths hot
                    tier_s.pop(), raw_s.pop()
                    continue
                ratios.append(raw_s[-1] / tier_s[-1])
            ratio = statistics.median(ratios)
            worst = ratio if worst is None else min(worst, ratio)
            detail[f"{size_mb}MB"] = {"ratio": round(ratio, 3),
                                      "tier_gbps": round(length / statistics.median(tier_s) / 1e9,
                                                         3),
                                      "raw_gbps": round(length / statistics.median(raw_s) / 1e9, 3)}
            with store._lock:
                store.forget(sid)
            os.unlink(raw_path)
    finally:
        store.close()
    detail["io_mb"], detail["depth"] = io_mb, depth
    return {"ratio": worst, "detail": detail}


def _write_raw(path: str, length: int) -> None:
    from kv_store.tiers.aligned_io import DirectFile, aligned_buffer

    chunk = aligned_buffer(64 * MIB)
    chunk[:] = os.urandom(len(chunk))
    with DirectFile(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as f:
        for off in range(0, length, len(chunk)):
            f.pwrite_all([memoryview(chunk)[:min(len(chunk), length - off)]], off)
        f.sync()


def _write_turns(store, sid: str, nbytes: int, turns: int, bpt: int = 64 << 10) -> None:
    """A session of `nbytes` written as `turns` appends (one record each), durably."""
    tokens = nbytes // bpt
    per_turn = max(tokens // turns, 1)
    block = os.urandom(per_turn * bpt)
    done = 0
    while done < tokens:
        n = min(per_turn, tokens - done)
        payload = store.new_payload(sid, done, n * bpt)
        payload.write_at(0, block[:n * bpt])
        store.write(sid, done, list(range(done, done + n)), 1, bpt, "bench", payload)
        done += n


# -- DRAM tier through shared memory and gRPC, from another process -------------------------

def dram_reads(folder: str, size_mb: int, reps: int) -> dict:
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    from kv_store.config import StoreConfig
    from kv_store.main import start

    server, store = start(StoreConfig(listen="127.0.0.1:0", data_dir=folder,
                                      dram_bytes=size_mb * MIB * 2, eviction="lru"))
    try:
        _write_turns(store, "hot", size_mb * MIB, turns=4)
        assert "hot" in store.dram
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            got = pool.submit(_worker_reads, f"127.0.0.1:{server.port}", "hot", reps).result()
    finally:
        server.stop(0)
        store.close()
    return got


def _worker_reads(target: str, session_id: str, reps: int) -> dict:
    """In a separate process, as a co-located worker: shared memory, gRPC, and memcpy."""
    from compute_worker.kv_client import KVClient

    local, remote = KVClient(target), KVClient(target, shared_memory=False)
    if not local.co_located:
        raise RuntimeError("the worker process does not see the store's shared memory")
    nbytes = len(local.read(session_id).data)  # warm both paths once
    remote.read(session_id)
    source = os.urandom(nbytes)
    shm_s, grpc_s, copy_s = [], [], []
    for _ in range(reps):
        start = time.perf_counter()
        copy = bytearray(source)
        copy_s.append(time.perf_counter() - start)
        del copy
        start = time.perf_counter()
        got = local.read(session_id)
        shm_s.append(time.perf_counter() - start)
        assert len(got.data) == nbytes
        del got
        start = time.perf_counter()
        got = remote.read(session_id)
        grpc_s.append(time.perf_counter() - start)
        del got
    ratios = [c / s for c, s in zip(copy_s, shm_s)]
    grpc_gbps = nbytes / statistics.median(grpc_s) / 1e9
    return {"shm_vs_memcpy": statistics.median(ratios), "grpc_gbps": grpc_gbps,
            "detail": {"bytes": nbytes,
                       "shm_gbps": round(nbytes / statistics.median(shm_s) / 1e9, 3),
                       "memcpy_gbps": round(nbytes / statistics.median(copy_s) / 1e9, 3),
                       "grpc_gbps": round(grpc_gbps, 3)}}


# -- write amplification --------------------------------------------------------------------

def write_amplification(folder: str, sessions: int = 8, turns: int = 6,
                        bpt: int = 46080) -> dict:
    """SmolLM2-sized KV (46 KB a token), 50-300 new tokens a turn, each turn restarting one
    token early (the stored tail token re-tokenised differently), through the store."""
    from kv_store.config import StoreConfig
    from kv_store.store import KVStore

    store = KVStore(StoreConfig(data_dir=folder, dram_bytes=256 * MIB, eviction="lru"))
    rng = random.Random(1)
    try:
        for s in range(sessions):
            stored = 0
            for _ in range(turns):
                start = max(stored - 1, 0)
                new = rng.randrange(50, 300) + (stored - start)
                payload = store.new_payload(f"w{s}", start, new * bpt)
                payload.write_at(0, os.urandom(new * bpt))
                store.write(f"w{s}", start, list(range(start, start + new)), 1, bpt, "bench",
                            payload)
                stored = start + new
        stats = store.stats()
    finally:
        store.close()
    ratio = stats["ssd_bytes_written"] / stats["kv_bytes_written"]
    return {"ratio": ratio, "detail": {"ssd_bytes_written": stats["ssd_bytes_written"],
                                       "kv_bytes_written": stats["kv_bytes_written"],
                                       "sessions": sessions, "turns": turns}}


# -- eviction decisions -----------------------------------------------------------------------

def evict_decision(sessions: int, decisions: int = 2000) -> dict:
    from kv_store.config import StoreConfig
    from kv_store.store import make_store_policy

    config = StoreConfig(dram_bytes=200 << 30)
    policy = make_store_policy(config)
    rng = random.Random(3)
    now = 0.0
    for i in range(sessions):
        now += 0.01
        policy.admit(i, rng.randrange(1, 400) * MIB, now)
        policy.observe_answer(i, rng.randrange(5, 800), now)
    leased = set(rng.sample(range(sessions), 30))  # queued or running requests hold leases
    times = []
    next_key = sessions
    for _ in range(decisions):
        now += 0.01
        start = time.perf_counter()
        victim = policy.victim(now, leased)
        policy.remove(victim)
        policy.admit(next_key, rng.randrange(1, 400) * MIB, now)
        times.append(time.perf_counter() - start)
        next_key += 1
    return {"ms_p50": statistics.median(times) * 1e3,
            "detail": {"policy": policy.name, "sessions": sessions,
                       "ms_p99": round(sorted(times)[int(0.99 * len(times))] * 1e3, 5)}}
