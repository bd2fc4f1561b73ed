"""Fast gRPC fuzzing: every method of every service (KV store, compute worker, scheduler, gRPC
health) with well-formed messages whose fields hold boundary values (integer extremes for their
width, NaN and infinities, long, adversarial and empty strings, unknown enum values), built from
the descriptors, so fields added later are fuzzed too. Passing: no UNKNOWN/INTERNAL (a servicer
that raised), no DEADLINE_EXCEEDED (a hang), no DATA_LOSS. Register/Deregister go to a scheduler
of their own (an accepted registration would join the deployment's pool)."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.descriptor import FieldDescriptor as F

from bench.chaos.fuzz_judge import CRASH
from bench.chaos.fuzz_tally import ClassTally

INT_VALUES = {F.TYPE_INT32: [-2**31, 2**31 - 1, -1, 0, 1], F.TYPE_SINT32: [-2**31, 2**31 - 1],
              F.TYPE_SFIXED32: [-2**31, 2**31 - 1], F.TYPE_UINT32: [0, 1, 2**32 - 1, 2**31],
              F.TYPE_FIXED32: [0, 2**32 - 1], F.TYPE_INT64: [-2**63, 2**63 - 1, -1, 0],
              F.TYPE_SINT64: [-2**63, 2**63 - 1], F.TYPE_SFIXED64: [-2**63, 2**63 - 1],
              F.TYPE_UINT64: [0, 2**64 - 1, 2**63], F.TYPE_FIXED64: [0, 2**64 - 1]}
FLOATS = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, -0.0, 1e-45, 0.5]
STRINGS = ["", "../../etc/passwd", "a\0b", "x" * 5000, "ü/€/🙂", " ", "$(rm -rf /)",
           "127.0.0.1:1", "sessions/00/x.kv", "\u202e\ufeff"]


def _value(fd, rng: random.Random):
    if fd.type in INT_VALUES:
        return rng.choice(INT_VALUES[fd.type] + [rng.randrange(-50, 50) % (2**31)])
    if fd.type in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        value = rng.choice(FLOATS)
        return value if fd.type == F.TYPE_DOUBLE or abs(value) < 3e38 else float("inf")
    if fd.type == F.TYPE_BOOL:
        return rng.random() < 0.5
    if fd.type == F.TYPE_STRING:
        return rng.choice(STRINGS)
    if fd.type == F.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 1, 300]))
    if fd.type == F.TYPE_ENUM:
        return rng.randrange(-2, 12)
    return None  # a message: filled by _fill


def _fill(msg, rng: random.Random, depth: int = 0):
    for fd in msg.DESCRIPTOR.fields:
        if rng.random() < 0.3:
            continue
        repeated = fd.is_repeated
        for _ in range(rng.randrange(4) if repeated else 1):
            if fd.type == F.TYPE_MESSAGE:
                if depth >= 3 or fd.message_type.GetOptions().map_entry:
                    break
                target = getattr(msg, fd.name).add() if repeated else getattr(msg, fd.name)
                _fill(target, rng, depth + 1)
                if not repeated:
                    target.SetInParent()
            elif repeated:
                getattr(msg, fd.name).append(_value(fd, rng))
            else:
                setattr(msg, fd.name, _value(fd, rng))
    return msg


def _cheap_turn(turn, rng: random.Random) -> None:
    """A valid turn runs the model: at most two tokens."""
    turn.max_tokens = rng.randrange(3)
    turn.min_tokens = 0  # else it would raise the default length (max_tokens 0) up to it
    turn.ignore_eos = False


def _services():
    from grpc_health.v1 import health_pb2

    from services.runtime.gen import compute_worker_pb2, kv_store_pb2, scheduler_pb2

    return {"store": kv_store_pb2.DESCRIPTOR.services_by_name["KVStore"],
            "worker": compute_worker_pb2.DESCRIPTOR.services_by_name["ComputeWorker"],
            "scheduler": scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"],
            "health": health_pb2.DESCRIPTOR.services_by_name["Health"]}


def _call(chan, svc, method, rng: random.Random, store_target: str, timeout: float):
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(method.input_type)
    out = message_factory.GetMessageClass(method.output_type)

    def make():
        msg = _fill(cls(), rng)
        if method.input_type.name == "TurnRequest":
            _cheap_turn(msg, rng)
        if method.input_type.name == "WorkerTurnRequest":
            _cheap_turn(msg.turn, rng)
            del msg.kv_stores[:]
            msg.kv_stores.append(store_target)
        return msg

    path = f"/{svc.full_name}/{method.name}"
    kw = dict(request_serializer=lambda m: m.SerializeToString(),
              response_deserializer=out.FromString)
    if method.client_streaming and method.server_streaming:  # Awareness: a few events, hang up
        stream = chan.stream_stream(path, **kw)(iter([make() for _ in range(rng.randrange(4))]),
                                                timeout=timeout)
        try:
            next(stream, None)
        finally:
            stream.cancel()
    elif method.client_streaming:
        chan.stream_unary(path, **kw)(iter([make() for _ in range(rng.randrange(4))]),
                                      timeout=timeout)
    elif method.server_streaming:
        for _ in chan.unary_stream(path, **kw)(make(), timeout=timeout):
            pass
    else:
        chan.unary_unary(path, **kw)(make(), timeout=timeout)


def fuzz_grpc_fast(targets: dict[str, str], own_scheduler: str, per_method: int,
                   turn_methods: int, seed: int = 0, threads: int = 8,
                   timeout: float = 60.0) -> dict[str, ClassTally]:
    """targets: service -> address (store, worker, scheduler); health is asked of each.
    `turn_methods`: inputs for the methods that can run the model (RunTurn, SubmitTurn)."""
    from services.runtime.grpc_util import channel

    tallies: dict[str, ClassTally] = {}
    chans = {name: channel(addr) for name, addr in {**targets, "own": own_scheduler}.items()}
    jobs = []
    for name, svc in _services().items():
        for method in svc.methods:
            if method.name == "Watch":
                continue  # a health watch never ends by design
            n = turn_methods if method.name in ("RunTurn", "SubmitTurn") else per_method
            where = ["own"] if method.name in ("Register", "Deregister") else (
                list(targets) if name == "health" else [name])
            jobs += [(name, svc, method, where[i % len(where)], i) for i in range(n)]
    random.Random(seed).shuffle(jobs)

    def run(job):
        name, svc, method, where, i = job
        code = grpc.StatusCode.OK
        detail = ""
        try:
            _call(chans[where], svc, method, random.Random(f"{seed}-{method.name}-{i}"),
                  targets["store"], timeout)
        except grpc.RpcError as exc:
            code, detail = exc.code(), exc.details() or ""
        return f"{svc.name}.{method.name}", code, detail

    with ThreadPoolExecutor(threads) as pool:
        for key, code, detail in pool.map(run, jobs):
            tally = tallies.setdefault(key, ClassTally())
            tally.saw(code.name, f"{code.name}: {detail[:160]}" if code in CRASH else "")
    for chan in chans.values():
        chan.close()
    return tallies
