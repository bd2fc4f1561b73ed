"""The compute side's client of the KV store's data plane (lookup, chunked read and write)."""
from __future__ import annotations

from dataclasses import dataclass

import grpc

from services.gen import kv_store_pb2, kv_store_pb2_grpc
from services.grpc_util import CHUNK_BYTES, channel


@dataclass
class StoredKV:
    tier: int
    format: int
    bytes_per_token: int
    model: str
    token_ids: list[int]
    data: bytes


class KVClient:
    def __init__(self, target: str, timeout: float = 120.0):
        self.target = target
        self.timeout = timeout
        self._channel = channel(target)
        self.stub = kv_store_pb2_grpc.KVStoreStub(self._channel)

    def lookup(self, session_id: str, lease: bool = False) -> kv_store_pb2.LookupReply:
        return self.stub.Lookup(kv_store_pb2.LookupRequest(session_id=session_id, lease=lease),
                                timeout=self.timeout)

    def release(self, lease_id: str) -> None:
        if lease_id:
            try:
                self.stub.ReleaseLease(kv_store_pb2.ReleaseLeaseRequest(lease_id=lease_id),
                                       timeout=self.timeout)
            except grpc.RpcError:
                pass  # it expires on its own

    def read(self, session_id: str, max_tokens: int = 0) -> StoredKV:
        """The first `max_tokens` tokens of KV (all if 0). Raises grpc.RpcError (NOT_FOUND...)."""
        stream = self.stub.ReadKV(kv_store_pb2.ReadKVRequest(session_id=session_id,
                                                             max_tokens=max_tokens),
                                  timeout=self.timeout)
        header = None
        buf = bytearray()
        for chunk in stream:
            if chunk.WhichOneof("kind") == "header":
                header = chunk.header
            else:
                if chunk.offset != len(buf):
                    raise IOError(f"KV stream of {session_id!r} out of order")
                buf += chunk.data
        if header is None or len(buf) != header.num_tokens * header.bytes_per_token:
            raise IOError(f"KV stream of {session_id!r} ended early")
        return StoredKV(header.tier, header.format, header.bytes_per_token, header.model,
                        list(header.token_ids), bytes(buf))

    def write(self, session_id: str, start_token: int, token_ids: list[int], format: int,
              bytes_per_token: int, model: str, data: bytes) -> kv_store_pb2.WriteKVReply:
        def chunks():
            yield kv_store_pb2.KVChunk(header=kv_store_pb2.KVHeader(
                session_id=session_id, start_token=start_token, num_tokens=len(token_ids),
                token_ids=token_ids, format=format, bytes_per_token=bytes_per_token,
                model=model))
            view = memoryview(data)
            for offset in range(0, len(data), CHUNK_BYTES):
                yield kv_store_pb2.KVChunk(data=bytes(view[offset:offset + CHUNK_BYTES]),
                                           offset=offset)
        return self.stub.WriteKV(chunks(), timeout=self.timeout)

    def close(self) -> None:
        self._channel.close()
