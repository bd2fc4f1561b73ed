"""Crash safety with real crashes: a store process killed with SIGKILL in the middle of writes,
again and again, restarted over the same directory; and corruption injected by flipping bytes
on disk. Every acknowledged write comes back intact; a torn or corrupt record is a miss."""
from __future__ import annotations

import random
import signal
import struct
import subprocess
import sys
import threading
import time

import grpc
import pytest

from compute_worker.kv_client import KVClient
from kv_store.tiers.aligned_io import ALIGN
from services.runtime.gen import common_pb2
from services.runtime.grpc_util import wait_healthy
from services.launch.launcher import free_port
from tests.cluster import token_file
from tests.store_helpers import BPT, store, token_bytes  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
SESSIONS_PER_WRITER, WRITERS, ROUNDS = 4, 3, 5
STORE_DEFAULTS = dict(eviction="lru")


class StoreProcess:
    def __init__(self, data_dir, log_path):
        self.data_dir, self.log_path = data_dir, log_path
        self.proc = None

    def start(self) -> str:
        port = free_port()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "serve", "store", "--listen",
                 f"127.0.0.1:{port}", "--data-dir", str(self.data_dir), "--dram-bytes", "2MiB",
                 "--eviction", "lru", "--shm-dir", str(self.data_dir.parent / "shm"),
                 "--cluster-token-file", token_file(self.data_dir.parent)],
                stdout=log, stderr=subprocess.STDOUT)
        target = f"127.0.0.1:{port}"
        wait_healthy(target, timeout=60, alive=lambda: self.proc.poll() is None)
        return target

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def writer(client: KVClient, sessions: list[str], acked: dict, inflight: dict, stop, seed: int):
    rng = random.Random(seed)
    while not stop.is_set():
        sid = rng.choice(sessions)
        have = acked[sid]
        start_token = len(have) if not have or rng.random() > 0.2 else rng.randrange(len(have))
        new = [rng.randrange(50000) for _ in range(rng.randrange(4, 48))]
        after = have[:start_token] + new
        inflight[sid] = after
        try:
            client.write(sid, start_token, new, KV, BPT, "m",
                         token_bytes(sid, after)[start_token * BPT:])
        except grpc.RpcError:
            return  # the store died under us: this write was never acknowledged
        acked[sid] = after
        inflight.pop(sid, None)


def test_sigkill_in_the_middle_of_writes_loses_no_acknowledged_write(tmp_path):
    (tmp_path / "shm").mkdir()
    store = StoreProcess(tmp_path / "ssd", tmp_path / "store.log")
    sessions = [[f"w{w}-s{i}" for i in range(SESSIONS_PER_WRITER)] for w in range(WRITERS)]
    acked = {s: [] for group in sessions for s in group}
    rng = random.Random(7)
    checked = 0
    for round_ in range(ROUNDS):
        target = store.start()
        clients = [KVClient(target, timeout=30) for _ in range(WRITERS)]
        inflight: dict = {}
        stop = threading.Event()
        threads = [threading.Thread(target=writer, args=(clients[w], sessions[w], acked,
                                                         inflight, stop, round_ * 10 + w))
                   for w in range(WRITERS)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.4, 1.2))
        store.kill()  # SIGKILL: no clean-up, writes cut anywhere
        stop.set()
        for t in threads:
            t.join(timeout=60)
        for c in clients:
            c.close()
        target = store.start()
        client = KVClient(target, timeout=30)
        for sid, tokens in acked.items():
            if not tokens and sid not in inflight:
                continue
            try:
                got = client.read(sid)
            except grpc.RpcError as exc:
                if not tokens and exc.code() == grpc.StatusCode.NOT_FOUND:
                    continue  # its first write was in flight: never acknowledged, not stored
                pytest.fail(f"round {round_}: acknowledged session {sid} lost: {exc.details()}")
            assert got.token_ids in (tokens, inflight.get(sid)), (
                f"round {round_}: {sid}: got {len(got.token_ids)} tokens, acknowledged "
                f"{len(tokens)}, in flight {len(inflight.get(sid) or [])}")
            assert got.data == token_bytes(sid, got.token_ids), f"round {round_}: {sid} bytes"
            acked[sid] = list(got.token_ids)  # an in-flight write that landed counts from now
            checked += 1
        client.close()
        store.kill()
    assert checked >= ROUNDS * WRITERS  # the writers did write


def flip(path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x5A]))


def record_offsets(path) -> list[int]:
    """Start of each record of a session file (header, then payload, each ALIGN-padded)."""
    from kv_store.tiers.ssd import SsdTier

    size, starts, offset = path.stat().st_size, [], 0
    while offset < size:
        starts.append(offset)
        with open(path, "rb") as fh:
            fh.seek(offset)
            head = fh.read(ALIGN)
        _, _, _, _, _, ntok, bpt, plen, slen, mlen, _, _ = struct.unpack_from("<4sHBBIIQQHHII",
                                                                               head)
        offset += -(-(40 + slen + mlen + 4 * ntok) // ALIGN) * ALIGN + -(-plen // ALIGN) * ALIGN
    assert SsdTier  # the layout the store writes
    return starts


def test_flipped_bytes_are_a_miss_never_returned(store):
    client, core = store(dram_bytes=0)  # every read comes from SSD
    turns = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    tokens: list[int] = []
    for turn in turns:
        client.write("s", len(tokens), turn, KV, BPT, "m", token_bytes("s", tokens + turn)[
            len(tokens) * BPT:])
        tokens += turn
    client.write("one", 0, [1, 2], KV, BPT, "m", token_bytes("one", [1, 2]))
    path = core.ssd.path("s")
    starts = record_offsets(path)
    assert len(starts) == 3
    flip(path, starts[1] + ALIGN + 100)  # the second turn's payload
    got = client.read("s")
    assert got.token_ids == [1, 2, 3] and got.data == token_bytes("s", [1, 2, 3])
    assert client.lookup("s").num_tokens == 3  # the bad records were cut off for good
    flip(core.ssd.path("one"), ALIGN + 5)
    with pytest.raises(grpc.RpcError) as err:
        client.read("one")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert client.lookup("one").tier == common_pb2.TIER_NONE
    assert core.stats()["corrupt_records"] == 2
    # The store keeps serving, and the session grows again from what survived.
    client.write("s", 3, [10], KV, BPT, "m", token_bytes("s", [1, 2, 3, 10])[3 * BPT:])
    assert client.read("s").data == token_bytes("s", [1, 2, 3, 10])


def test_a_corrupt_header_is_cut_at_restart(store):
    client, core = store()
    client.write("s", 0, [1, 2], KV, BPT, "m", token_bytes("s", [1, 2]))
    client.write("s", 2, [3], KV, BPT, "m", token_bytes("s", [1, 2, 3])[2 * BPT:])
    path = core.ssd.path("s")
    store.stop(core)
    flip(path, record_offsets(path)[1] + 20)  # the second record's header
    client, core = store()
    got = client.read("s")
    assert got.token_ids == [1, 2] and got.data == token_bytes("s", [1, 2])
