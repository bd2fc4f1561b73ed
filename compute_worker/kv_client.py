"""The compute side's client of the KV store's data plane (lookup, read, write, leases).

Two paths behind the same calls. On the store's machine (the client can read back the probe token
the store left in its shared-memory directory) KV moves through the store's shared-memory
regions: a read copies the bytes straight out of the regions the store leased to it, a write
puts them into a region the store prepared; only small control messages cross gRPC. Elsewhere,
or whenever the shared path is refused (no room in shared memory, a region gone), KV moves in
chunked gRPC streams (no message over 4 MiB).
"""
from __future__ import annotations

import mmap
import os
import pathlib
from dataclasses import dataclass

import grpc

from services.runtime.gen import kv_store_pb2, kv_store_pb2_grpc
from services.runtime.grpc_util import CHUNK_BYTES, channel

SHM_MIN_BYTES = 64 << 10  # below this a gRPC stream is as quick as the extra round trip


@dataclass
class StoredKV:
    tier: int
    format: int
    bytes_per_token: int
    model: str
    token_ids: list[int]
    data: memoryview  # bytes-like: slice it, compare it, bytes()/bytearray() it
    dtype: int = 0  # KV_DTYPE_* of the bytes (0: the writer did not say)
    start_token: int = 0  # `data` holds tokens [start_token, len(token_ids)) (a suffix read)


class KVClient:
    def __init__(self, target: str, timeout: float = 120.0, shared_memory: bool = True):
        """`shared_memory`: use the store's regions when it runs on this machine."""
        self.target = target
        self.timeout = timeout
        self._channel = channel(target)
        self.stub = kv_store_pb2_grpc.KVStoreStub(self._channel)
        # ReadKV with the messages left as wire bytes: a data chunk is parsed by hand so its
        # bytes are copied once, straight into the reader's buffer (see _data_chunk).
        self._read_wire = self._channel.unary_stream(
            "/bidaw.v1.KVStore/ReadKV",
            request_serializer=kv_store_pb2.ReadKVRequest.SerializeToString)
        self._shm_dir: pathlib.Path | None = None
        self._shm_checked = not shared_memory
        # Lease releases in flight, held until answered: gRPC cancels a call whose future is
        # garbage-collected, and a lost release kept the read's DRAM pages until the lease
        # expired (a whole read then found no room in DRAM and was not admitted).
        self._releasing: set[grpc.Future] = set()

    # -- control ----------------------------------------------------------------------------

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

    def _release_soon(self, lease_id: str) -> None:
        """ReleaseLease without waiting for the answer (a read's latency need not include it)."""
        if not lease_id:  # (a store from before prepared writes had leases to give back)
            return
        future = self.stub.ReleaseLease.future(kv_store_pb2.ReleaseLeaseRequest(
            lease_id=lease_id), timeout=self.timeout)
        self._releasing.add(future)
        future.add_done_callback(self._releasing.discard)

    @property
    def co_located(self) -> bool:
        """The store shares this machine's memory with us (asked once, and again after the
        store restarted)."""
        if not self._shm_checked:
            self._shm_checked = True
            self._shm_dir = None
            try:
                info = self.stub.ShmInfo(kv_store_pb2.ShmInfoRequest(), timeout=self.timeout)
                folder = pathlib.Path(info.dir)
                if info.token and (folder / info.probe).read_text() == info.token:
                    self._shm_dir = folder
            except (grpc.RpcError, OSError):
                pass  # another machine (or an old store): gRPC streams
        return self._shm_dir is not None

    # -- reads ------------------------------------------------------------------------------

    def read(self, session_id: str, max_tokens: int = 0, start_token: int = 0) -> StoredKV:
        """The first `max_tokens` tokens of KV (all if 0), from `start_token` on (the token
        ids are all those before the last token read). Raises grpc.RpcError (NOT_FOUND...)."""
        if self.co_located:
            got = self._read_shm(session_id, max_tokens, start_token)
            if got is not None:
                return got
        return self._read_stream(session_id, max_tokens, start_token)

    def _read_shm(self, session_id: str, max_tokens: int, start_token: int) -> StoredKV | None:
        try:
            reply = self.stub.OpenShmRead(kv_store_pb2.OpenShmReadRequest(
                session_id=session_id, max_tokens=max_tokens, start_token=start_token),
                timeout=self.timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None  # not in shared memory now: the stream serves it
            raise
        header = reply.header
        view = _buffer(header.num_tokens * header.bytes_per_token)
        files: dict[str, int] = {}
        try:
            pos = 0
            for piece in reply.pieces:
                fd = files.get(piece.region)
                if fd is None:
                    fd = files[piece.region] = os.open(self._shm_dir / piece.region, os.O_RDONLY)
                _pread_exact(fd, view[pos:pos + piece.length], piece.offset)
                pos += piece.length
            if pos != len(view):
                return None
        except OSError:
            self._shm_checked = False  # the store restarted (a new arena): ask again next time
            return None  # the store's memory is gone (it restarted): read over the stream
        finally:
            for fd in files.values():
                os.close(fd)
            self._release_soon(reply.lease_id)
        return _stored(header, view)

    def _read_stream(self, session_id: str, max_tokens: int, start_token: int) -> StoredKV:
        stream = self._read_wire(kv_store_pb2.ReadKVRequest(
            session_id=session_id, max_tokens=max_tokens, start_token=start_token),
            timeout=self.timeout)
        header = None
        view = _buffer(0)
        received = 0
        for raw in stream:
            data, offset = _data_chunk(raw)
            if data is None:
                chunk = kv_store_pb2.KVChunk.FromString(raw)
                if chunk.WhichOneof("kind") == "header":
                    header = chunk.header
                    view = _buffer(header.num_tokens * header.bytes_per_token)
                    continue
                data, offset = memoryview(chunk.data), chunk.offset
            end = received + len(data)
            if header is None or offset != received or end > len(view):
                raise IOError(f"KV stream of {session_id!r} out of order")
            view[received:end] = data
            received = end
        if header is None or received != len(view):
            raise IOError(f"KV stream of {session_id!r} ended early")
        return _stored(header, view)

    # -- writes -----------------------------------------------------------------------------

    def write(self, session_id: str, start_token: int, token_ids: list[int], format: int,
              bytes_per_token: int, model: str, data: bytes,
              durable: bool = True, dtype: int = 0) -> kv_store_pb2.WriteKVReply:
        """Store the KV of `token_ids` from `start_token` on. `durable=False` lets the store
        reply once the KV is in DRAM, its SSD copy following (reply.durable says which).
        `dtype`: KV_DTYPE_* of `data` (0, unsaid: stored, but no worker reuses it)."""
        header = kv_store_pb2.KVHeader(
            session_id=session_id, start_token=start_token, num_tokens=len(token_ids),
            token_ids=token_ids, format=format, bytes_per_token=bytes_per_token, model=model,
            allow_async=not durable, dtype=dtype)
        if len(data) >= SHM_MIN_BYTES and self.co_located:
            region = self._write_region(session_id, start_token, data)
            if region:
                header.shm_region = region
                return self.stub.WriteKV(iter([kv_store_pb2.KVChunk(header=header)]),
                                         timeout=self.timeout)

        def chunks():
            yield kv_store_pb2.KVChunk(header=header)
            view = memoryview(data)
            for offset in range(0, len(data), CHUNK_BYTES):
                yield kv_store_pb2.KVChunk(data=bytes(view[offset:offset + CHUNK_BYTES]),
                                           offset=offset)
        return self.stub.WriteKV(chunks(), timeout=self.timeout)

    def _write_region(self, session_id: str, start_token: int, data) -> str:
        """Put `data` into the regions the store prepared; '' when the stream must carry it."""
        try:
            reply = self.stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
                session_id=session_id, start_token=start_token, num_bytes=len(data)),
                timeout=self.timeout)
        except grpc.RpcError:
            return ""  # no room in shared memory now
        try:
            view = memoryview(data).cast("B")
            if sum(p.length for p in reply.pieces) != len(view):
                self._release_soon(reply.lease_id)  # not what we asked for: give it back
                return ""
            pos = 0
            for piece in reply.pieces:
                fd = os.open(self._shm_dir / piece.region, os.O_WRONLY)
                try:
                    done = 0
                    while done < piece.length:
                        done += os.pwrite(fd, view[pos + done:pos + piece.length],
                                          piece.offset + done)
                finally:
                    os.close(fd)
                pos += piece.length
            return reply.region
        except OSError:
            self._shm_checked = False  # the store restarted (a new arena): ask again next time
            self._release_soon(reply.lease_id)  # and the write streams: the region goes back
            return ""

    def close(self) -> None:
        self._channel.close()


_POPULATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)


def _buffer(nbytes: int) -> memoryview:
    """Memory for a read: an anonymous mapping whose pages the kernel hands out up front, in
    one batch (no zeroing pass of ours, and no page fault per 4 KiB inside the copy, which
    halves a pread's speed), so a read costs about what a memcpy of the bytes does."""
    return memoryview(mmap.mmap(-1, nbytes, flags=_POPULATE) if nbytes else b"")


def _varint(raw: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _data_chunk(raw: bytes) -> tuple[memoryview | None, int]:
    """(data, offset) of a KVChunk that is exactly `data` then an optional `offset` field, as
    the store sends them, without copying the data; (None, 0) for anything else."""
    view = memoryview(raw)
    try:
        if not view or view[0] != 0x12:  # field 2 (data), length-delimited
            return None, 0
        length, pos = _varint(view, 1)
        data, pos = view[pos:pos + length], pos + length
        if len(data) != length:
            return None, 0
        if pos == len(view):
            return data, 0
        if view[pos] != 0x18:  # field 3 (offset), varint
            return None, 0
        offset, pos = _varint(view, pos + 1)
        return (data, offset) if pos == len(view) else (None, 0)
    except IndexError:  # truncated: let protobuf say what is wrong
        return None, 0


def _pread_exact(fd: int, into: memoryview, offset: int) -> None:
    got = 0
    while got < len(into):
        n = os.preadv(fd, [into[got:]], offset + got)
        if n == 0:
            raise OSError("the store's shared memory is shorter than its lease says")
        got += n


def _stored(header: kv_store_pb2.KVHeader, view: memoryview) -> StoredKV:
    """What a read's header and bytes say; the ids must reach the last token carried."""
    if len(header.token_ids) != header.start_token + header.num_tokens:
        raise IOError(f"KV of {header.session_id!r}: {len(header.token_ids)} token ids for "
                      f"tokens {header.start_token}..{header.start_token + header.num_tokens}")
    return StoredKV(header.tier, header.format, header.bytes_per_token, header.model,
                    list(header.token_ids), view, header.dtype, header.start_token)
