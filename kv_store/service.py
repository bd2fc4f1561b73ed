"""The KVStore gRPC service: translates bidaw.v1 messages into KVStore calls, and the store's
own types (Tier, KvFormat, KvDtype) to and from the wire's enums: protobuf stops here."""
from __future__ import annotations

import functools
import logging
import queue
import threading

import grpc

import services.runtime.tracing as tracing
from services.runtime import metrics
from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc
from services.runtime.grpc_util import CHUNK_BYTES
from services.runtime.limits import INT32_MAX, UINT32_MAX, first_outside
from services.runtime.rpc_errors import BadRequest

from kv_store.tiers.buffers import Payload, ReadHandle
from kv_store.chunk_wire import encode_data
from kv_store.errors import StoreError, invalid
from kv_store.events import LoadDone, Location
from kv_store.tiers.shm_arena import ARENA, PROBE
from kv_store.store import KVStore
from kv_store.store_state import KvDtype, KvFormat, Tier

log = logging.getLogger("bidaw.kv_store")
MAX_WRITE_BYTES = 16 << 30  # one turn's KV; anything larger is a client bug
MAX_LEASE_S = 3600.0  # a lease pins KV against eviction: an endless one would leak it


_WIRE_TIER = {Tier.NONE: common_pb2.TIER_NONE, Tier.DRAM: common_pb2.TIER_DRAM,
              Tier.SSD: common_pb2.TIER_SSD, Tier.LOADING: common_pb2.TIER_LOADING}
_WIRE_FORMAT = {KvFormat.KV: common_pb2.KV_FORMAT_KV,
                KvFormat.TENSOR6: common_pb2.KV_FORMAT_TENSOR6}
_STORE_FORMAT = {wire: fmt for fmt, wire in _WIRE_FORMAT.items()}  # .get: None for a value
# the store does not know, which it refuses with the reason (after the checks that come first)


_WIRE_DTYPE = {KvDtype.UNKNOWN: common_pb2.KV_DTYPE_UNSPECIFIED,
               KvDtype.FLOAT32: common_pb2.KV_DTYPE_FLOAT32,
               KvDtype.BFLOAT16: common_pb2.KV_DTYPE_BFLOAT16,
               KvDtype.FLOAT16: common_pb2.KV_DTYPE_FLOAT16}
_STORE_DTYPE = {wire: dtype for dtype, wire in _WIRE_DTYPE.items()}  # .get: None, refused


def _wire_format(fmt: int) -> int:
    return _WIRE_FORMAT.get(fmt, common_pb2.KV_FORMAT_UNSPECIFIED)


def _wire_dtype(dtype: int) -> int:
    return _WIRE_DTYPE.get(dtype, common_pb2.KV_DTYPE_UNSPECIFIED)


def _lease_seconds(value: float) -> float:
    """A lease lifetime the store can honour (0: its default). NaN or infinity would never
    expire and a negative one would expire at once, so they are refused, not stored."""
    if not 0.0 <= value <= MAX_LEASE_S:  # NaN fails both comparisons
        raise invalid(f"lease_seconds must lie in [0, {MAX_LEASE_S:g}], not {value}")
    return value


def _status(method):
    """Answer StoreErrors with their gRPC status and message."""
    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except StoreError as exc:
            context.abort(exc.code, exc.message)
    return wrapper


def _location_msg(loc: Location) -> kv_store_pb2.SessionLocation:
    return kv_store_pb2.SessionLocation(session_id=loc.session_id, tier=_WIRE_TIER[loc.tier],
                                        num_bytes=loc.num_bytes, num_tokens=loc.num_tokens,
                                        load_estimate_s=loc.load_estimate_s,
                                        waiting_for_room=loc.waiting_for_room,
                                        landed_from_token=loc.landed_from_token)


def _event_msg(event) -> kv_store_pb2.StoreEvent:
    if isinstance(event, LoadDone):
        return kv_store_pb2.StoreEvent(load_finished=kv_store_pb2.LoadFinished(
            session_id=event.session_id, ok=event.ok, load_s=event.load_s))
    return kv_store_pb2.StoreEvent(location=_location_msg(event))


class KVStoreService(kv_store_pb2_grpc.KVStoreServicer):
    def __init__(self, store: KVStore):
        self.store = store
        self.encode_chunks = True  # ReadKV data chunks leave pre-encoded (chunk_wire.py)

    @_status
    def Lookup(self, request, context):
        with tracing.span("kv_store.lookup", session=request.session_id) as span:
            meta, tier, lease_id = self.store.lookup(
                request.session_id, request.lease,
                _lease_seconds(request.lease_seconds) if request.lease else 0.0)
            span.set_attributes({"bidaw.tier": tier.value,
                                 "bidaw.hit": meta is not None,
                                 "bidaw.kv_bytes": meta.num_bytes if meta else 0,
                                 "bidaw.kv_tokens": meta.num_tokens if meta else 0})
        metrics.LOOKUPS.labels(tier.value).inc()
        if meta is None:
            return kv_store_pb2.LookupReply(tier=_WIRE_TIER[tier])
        return kv_store_pb2.LookupReply(
            tier=_WIRE_TIER[tier], num_bytes=meta.num_bytes, num_tokens=meta.num_tokens,
            format=_wire_format(meta.format),
            bytes_per_token=meta.bytes_per_token, token_ids=meta.token_ids, model=meta.model,
            lease_id=lease_id, dtype=_wire_dtype(meta.dtype))

    def ReadKV(self, request, context):
        try:
            handle = self.store.open_read(request.session_id, request.max_tokens,
                                          request.start_token)
        except StoreError as exc:
            context.abort(exc.code, exc.message)
        tier = handle.tier.value
        try:
            with tracing.span("kv_store.read", session=request.session_id, tier=tier,
                              kv_tokens=handle.num_tokens, path="grpc"):
                yield kv_store_pb2.KVChunk(header=_header(handle))
                offset = 0
                for data in handle.chunks(CHUNK_BYTES):
                    yield (encode_data(data, offset) if self.encode_chunks
                           else kv_store_pb2.KVChunk(data=data, offset=offset))
                    offset += len(data)
            metrics.KV_READ_BYTES.labels(tier).inc(offset)
        finally:
            handle.release()

    def WriteKV(self, request_iterator, context):
        try:
            header, payload = self._receive(request_iterator)
            nbytes = header.num_tokens * header.bytes_per_token
            with tracing.span("kv_store.write", session=header.session_id,
                              start_token=header.start_token, kv_tokens=header.num_tokens,
                              kv_bytes=nbytes, shm=bool(header.shm_region)):
                loc, durable = self.store.write(
                    header.session_id, header.start_token, list(header.token_ids),
                    _STORE_FORMAT.get(header.format), header.bytes_per_token, header.model,
                    payload, wait_durable=not header.allow_async,
                    dtype=_STORE_DTYPE.get(header.dtype))
            metrics.KV_WRITE_BYTES.inc(nbytes)
        except StoreError as exc:
            context.abort(exc.code, exc.message)
        return kv_store_pb2.WriteKVReply(num_tokens=loc.num_tokens, num_bytes=loc.num_bytes,
                                         tier=_WIRE_TIER[loc.tier], durable=durable)

    def _receive(self, request_iterator) -> tuple[kv_store_pb2.KVHeader, Payload]:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("kind") != "header":
            raise invalid("the first message of a KV write must be its header")
        header = first.header
        if header.num_tokens != len(header.token_ids):
            raise invalid(f"header.num_tokens={header.num_tokens} but "
                          f"{len(header.token_ids)} token ids")
        bad = first_outside(header.token_ids, 0, INT32_MAX)
        if bad is not None:
            raise invalid(f"header.token_ids holds {bad}, outside [0, {INT32_MAX}]")
        if header.start_token > UINT32_MAX:
            raise invalid(f"header.start_token {header.start_token} is above {UINT32_MAX}")
        total = header.num_tokens * header.bytes_per_token
        if total > MAX_WRITE_BYTES:
            raise invalid(f"write of {total} bytes exceeds the {MAX_WRITE_BYTES} byte limit")
        if total == 0:
            return header, Payload(0)  # the store refuses it with the precise reason
        if header.shm_region:
            if next(request_iterator, None) is not None:
                raise invalid("a write from a shared-memory region carries no data chunks")
            return header, self.store.take_prepared(header.shm_region, header.session_id, total)
        payload = self.store.new_payload(header.session_id, header.start_token, total)
        try:
            received = 0
            for chunk in request_iterator:
                if chunk.WhichOneof("kind") != "data":
                    raise invalid("a KV write carries exactly one header, first")
                if chunk.offset != received:
                    raise invalid(f"chunk at offset {chunk.offset}, expected {received}: "
                                  "chunks must arrive in order without gaps")
                if received + len(chunk.data) > total:
                    raise invalid(f"more KV bytes than the header's {total}")
                payload.write_at(received, chunk.data)
                received += len(chunk.data)
            if received != total:
                raise invalid(f"stream ended after {received} of {total} KV bytes")
        except BaseException:
            self.store.release_payload(payload)
            raise
        return header, payload

    @_status
    def Promote(self, request, context):
        with tracing.span("kv_store.promote", session=request.session_id) as span:
            loc = self.store.promote(request.session_id, request.announced)
            span.set_attributes({"bidaw.tier": loc.tier.value,
                                 "bidaw.kv_bytes": loc.num_bytes,
                                 "bidaw.load_estimate_s": loc.load_estimate_s})
        return kv_store_pb2.PromoteReply(tier=_WIRE_TIER[loc.tier],
                                         load_estimate_s=loc.load_estimate_s)

    @_status
    def ReleaseLease(self, request, context):
        self.store.release(request.lease_id)
        return kv_store_pb2.ReleaseLeaseReply()

    def Awareness(self, request_iterator, context):
        events = self.store.subscribe()
        refused: list[BadRequest] = []  # a malformed event ends the stream with its status

        def consume() -> None:
            try:
                for event in request_iterator:
                    self._on_compute_event(event)
            except grpc.RpcError:
                pass
            except BadRequest as exc:
                refused.append(exc)
            except Exception:  # a bad event must not kill the stream silently
                log.exception("awareness: bad compute event")
            finally:
                events.put(None)

        threading.Thread(target=consume, name="awareness-in", daemon=True).start()
        try:
            yield kv_store_pb2.StoreEvent(snapshot=kv_store_pb2.Snapshot(
                sessions=[_location_msg(loc) for loc in self.store.snapshot()]))
            while context.is_active():
                try:
                    event = events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if event is None:
                    if refused:
                        raise refused[0]
                    return
                yield _event_msg(event)
        finally:
            self.store.unsubscribe(events)

    def _on_compute_event(self, event: kv_store_pb2.ComputeEvent) -> None:
        kind = event.WhichOneof("kind")
        if kind == "hello":
            log.info("awareness: %s connected", event.hello.client_id)
        elif kind == "arrival" and event.arrival.session_id:
            self.store.on_arrival(event.arrival.session_id)
        elif kind == "turn_complete" and event.turn_complete.session_id:
            if event.turn_complete.answer_tokens > UINT32_MAX:
                raise BadRequest(f"turn_complete.answer_tokens "
                                 f"{event.turn_complete.answer_tokens} is above {UINT32_MAX}")
            self.store.on_turn_complete(event.turn_complete.session_id,
                                        event.turn_complete.answer_tokens)
        elif kind == "session_end" and event.session_end.session_id:
            self.store.on_session_end(event.session_end.session_id)

    def Stats(self, request, context):
        return kv_store_pb2.StoreStats(**self.store.stats())

    def ShmInfo(self, request, context):
        arena = self.store.arena
        return kv_store_pb2.ShmInfoReply(dir=str(arena.dir), probe=PROBE, token=arena.token)

    @_status
    def OpenShmRead(self, request, context):
        with tracing.span("kv_store.read", session=request.session_id, path="shm") as span:
            handle, lease_id = self.store.open_shm_read(request.session_id, request.max_tokens,
                                                        _lease_seconds(request.lease_seconds),
                                                        request.start_token)
            tier = handle.tier.value
            span.set_attributes({"bidaw.tier": tier, "bidaw.kv_tokens": handle.num_tokens})
        metrics.KV_READ_BYTES.labels(tier).inc(sum(p.length for p in handle.shm))
        return kv_store_pb2.OpenShmReadReply(header=_header(handle), lease_id=lease_id,
                                             pieces=_wire_pieces(handle.shm))

    @_status
    def PrepareShmWrite(self, request, context):
        name, pieces, lease = self.store.prepare_shm_write(
            request.session_id, request.start_token, request.num_bytes,
            _lease_seconds(request.lease_seconds))
        return kv_store_pb2.PrepareShmWriteReply(region=name, pieces=_wire_pieces(pieces),
                                                 lease_id=lease)


def _wire_pieces(pieces) -> list:
    return [kv_store_pb2.ShmPiece(region=ARENA, offset=p.segment.offset + p.offset,
                                  length=p.length) for p in pieces]


def _header(handle: ReadHandle) -> kv_store_pb2.KVHeader:
    meta = handle.meta
    return kv_store_pb2.KVHeader(session_id=meta.session_id, start_token=handle.start_token,
                                 num_tokens=handle.num_tokens, token_ids=meta.token_ids,
                                 format=_wire_format(meta.format),
                                 bytes_per_token=meta.bytes_per_token, model=meta.model,
                                 tier=_WIRE_TIER[handle.tier], dtype=_wire_dtype(meta.dtype))
