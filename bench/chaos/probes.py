"""Acknowledged KV, checked byte for byte. A probe writer stores KV for its own sessions with
durable (fsync-acknowledged) writes during the replay, retrying while the store is away; every
write the store acknowledged must read back identical after the fault (a write in flight when
the store died may come back as either version). Live sessions are checked too: KV the store
holds for a conversation must be for a prefix of that conversation's tokens, and KV that was on
SSD before a store restart must still be there after it."""
from __future__ import annotations

import random
import struct
import threading
import time

import grpc

from compute_worker.kv_client import KVClient
from services.runtime.gen import common_pb2

KV = common_pb2.KV_FORMAT_KV
BPT = 1024


def token_bytes(session: str, tokens: list[int], bpt: int = BPT) -> bytes:
    tag = sum(session.encode())
    return b"".join((struct.pack("<III", tag, p, v) * (bpt // 12 + 1))[:bpt]
                    for p, v in enumerate(tokens))


class ProbeWriter:
    def __init__(self, store_target: str, prefix: str, sessions: int = 4, seed: int = 0):
        self.target = store_target
        self.sessions = [f"{prefix}probe-{i}" for i in range(sessions)]
        self.acked: dict[str, list[int]] = {s: [] for s in self.sessions}
        self.inflight: dict[str, list[int]] = {}
        self.writes = self.refused = 0
        self._stop = threading.Event()
        self._rng = random.Random(seed)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "ProbeWriter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        client = KVClient(self.target, timeout=10, shared_memory=False)
        while not self._stop.is_set():
            sid = self._rng.choice(self.sessions)
            have = self.acked[sid]
            new = [self._rng.randrange(50000) for _ in range(self._rng.randrange(4, 24))]
            after = have + new
            self.inflight[sid] = after
            try:
                reply = client.write(sid, len(have), new, KV, BPT, "chaos-probe",
                                     token_bytes(sid, after)[len(have) * BPT:], durable=True)
                if reply.durable:
                    self.acked[sid] = after
                    self.writes += 1
                self.inflight.pop(sid, None)
            except grpc.RpcError:
                self.refused += 1  # not acknowledged: the store is away or refused it
                time.sleep(0.3)
            time.sleep(0.05)
        client.close()

    def lost(self, allowed_missing: set[str] = frozenset()) -> tuple[int, list[str]]:
        """(sessions whose acknowledged KV did not come back intact, details)."""
        client = KVClient(self.target, timeout=30, shared_memory=False)
        lost, why = 0, []
        for sid in self.sessions:
            want = self.acked[sid]
            if not want:
                continue
            try:
                got = client.read(sid)
                tokens, data = list(got.token_ids), bytes(got.data)
            except (grpc.RpcError, IOError) as exc:
                code = exc.code() if isinstance(exc, grpc.RpcError) else None
                if code == grpc.StatusCode.NOT_FOUND and sid in allowed_missing:
                    continue
                lost += 1
                why.append(f"{sid}: unreadable ({code})")
                continue
            ok = [want] + ([self.inflight[sid]] if sid in self.inflight else [])
            if not any(tokens == w and data == token_bytes(sid, w) for w in ok):
                if tokens != want[:len(tokens)] or data != token_bytes(sid, tokens) or \
                        sid not in allowed_missing:
                    lost += 1
                    why.append(f"{sid}: {len(tokens)} tokens back, {len(want)} acknowledged")
        client.close()
        return lost, why


def stored_tokens(store_target: str, sessions) -> dict[str, tuple[int, list[int]]]:
    """session -> (tier, token ids) the store holds now (sessions it holds nothing for omitted)."""
    from services.runtime.gen import kv_store_pb2, kv_store_pb2_grpc
    from services.runtime.grpc_util import channel

    stub = kv_store_pb2_grpc.KVStoreStub(channel(store_target))
    out = {}
    for sid in sessions:
        try:
            r = stub.Lookup(kv_store_pb2.LookupRequest(session_id=sid), timeout=10)
        except grpc.RpcError:
            continue
        if r.tier not in (common_pb2.TIER_NONE, common_pb2.TIER_UNSPECIFIED) and r.num_tokens:
            out[sid] = (r.tier, list(r.token_ids))
    return out


def wrong_live_kv(stored: dict[str, tuple[int, list[int]]],
                  conversations: dict[str, list[int]]) -> list[str]:
    """Sessions whose stored KV is not for a prefix of the conversation's tokens."""
    return [sid for sid, (_, toks) in stored.items()
            if sid in conversations and conversations[sid][:len(toks)] != toks]


def lost_ssd_kv(before: dict[str, tuple[int, list[int]]],
                after: dict[str, tuple[int, list[int]]]) -> list[str]:
    """Sessions that had KV on SSD before and hold less of it (or none) after."""
    return [sid for sid, (tier, toks) in before.items() if tier == common_pb2.TIER_SSD
            and after.get(sid, (0, []))[1][:len(toks)] != toks]
