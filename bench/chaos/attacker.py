"""An outsider who reaches the internal gRPC ports: it calls every method of every service
(from the protobuf descriptors, so a method added later is attacked too), without the cluster
token and with a guessed one, with the most harmful payloads it can build (deregister the real
worker, register a fake one, read, overwrite and promote a victim's KV). `snapshot` is what must
not change: membership, the victim's stored KV, the counters."""
from __future__ import annotations

import hashlib

import grpc

from services.runtime.cluster_auth import METADATA_KEY
from services.runtime.gen import (common_pb2, compute_worker_pb2, kv_store_pb2, kv_store_pb2_grpc,
                          scheduler_pb2, scheduler_pb2_grpc)
from services.runtime.grpc_util import channel

try:
    from google.protobuf.message_factory import GetMessageClass
except ImportError:  # protobuf < 4.21
    from google.protobuf.message_factory import MessageFactory

    def GetMessageClass(descriptor):  # noqa: N802 - the protobuf name
        return MessageFactory().GetPrototype(descriptor)

SERVICES = {  # kind -> the service descriptor of what listens there
    "scheduler": scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"],
    "store": kv_store_pb2.DESCRIPTOR.services_by_name["KVStore"],
    "worker": compute_worker_pb2.DESCRIPTOR.services_by_name["ComputeWorker"],
}
GUESS = "guessed-token"


def _request(method, session: str, worker: str, fake: str):
    """The request an attacker would send to `method`: aimed at `session` and the members."""
    msg = GetMessageClass(method.input_type)()
    fields = msg.DESCRIPTOR.fields_by_name
    if "session_id" in fields:
        msg.session_id = session
    if "header" in fields:  # a KV write: overwrite the victim's first tokens
        msg.header.session_id = session
        msg.header.num_tokens = 4
        msg.header.token_ids.extend([1, 2, 3, 4])
    if "turn" in fields:  # a worker turn: a prompt that would be answered
        msg.turn.session_id = session
        msg.turn.prompt_token_ids.extend([1, 2, 3])
    if "prompt_token_ids" in fields:
        msg.prompt_token_ids.extend([1, 2, 3])
    if method.full_name.endswith("Scheduler.Register"):
        msg.kind, msg.address = scheduler_pb2.MEMBER_KIND_WORKER, fake
    elif method.full_name.endswith("Scheduler.Deregister"):
        msg.kind, msg.address = scheduler_pb2.MEMBER_KIND_WORKER, worker
    return msg


def _call(ch: grpc.Channel, method, request, metadata) -> grpc.StatusCode:
    path = f"/{method.containing_service.full_name}/{method.name}"
    ser = type(request).SerializeToString
    make = {(False, False): ch.unary_unary, (False, True): ch.unary_stream,
            (True, False): ch.stream_unary, (True, True): ch.stream_stream}[
        (method.client_streaming, method.server_streaming)]
    stub = make(path, request_serializer=ser, response_deserializer=None)
    arg = iter([request]) if method.client_streaming else request
    try:
        reply = stub(arg, timeout=10, metadata=metadata)
        if method.server_streaming:
            for _ in reply:
                pass
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def attack(targets: dict[str, str], session: str, worker: str,
           fake: str = "127.0.0.1:1") -> dict[str, str]:
    """'Service/Method (no token|guessed token)' -> the status code name each call got."""
    results = {}
    for kind, target in targets.items():
        with channel(target, token=None) as ch:  # an outsider's channel: no token of ours
            for method in SERVICES[kind].methods:
                request = _request(method, session, worker, fake)
                for label, metadata in (("no token", None),
                                        ("guessed token", ((METADATA_KEY, GUESS),))):
                    code = _call(ch, method, request, metadata)
                    results[f"{method.containing_service.name}/{method.name} ({label})"] = \
                        code.name
    return results


def refused(results: dict[str, str]) -> list[str]:
    """The attacks that were not refused with UNAUTHENTICATED."""
    return [f"{call}: {code}" for call, code in results.items() if code != "UNAUTHENTICATED"]


def snapshot(scheduler: str, store: str, session: str) -> dict:
    """What an attack must not change, read with this process's token."""
    stats = scheduler_pb2_grpc.SchedulerStub(channel(scheduler)).Stats(
        scheduler_pb2.SchedulerStatsRequest(), timeout=10)
    kv = kv_store_pb2_grpc.KVStoreStub(channel(store))
    look = kv.Lookup(kv_store_pb2.LookupRequest(session_id=session), timeout=10)
    digest = hashlib.sha256()
    # The KV bytes only: the header also says which tier served them, which eviction may
    # change while the replay goes on.
    for chunk in kv.ReadKV(kv_store_pb2.ReadKVRequest(session_id=session), timeout=30):
        if chunk.WhichOneof("kind") == "data":
            digest.update(chunk.data)
    return {"workers": stats.workers, "stores": stats.stores,
            "turns_finished": stats.turns_finished, "turns_failed": stats.turns_failed,
            "kv_tier": common_pb2.Tier.Name(look.tier), "kv_tokens": list(look.token_ids),
            "kv_sha256": digest.hexdigest()}
