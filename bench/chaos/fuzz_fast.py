"""The fast fuzzer: 100,000+ malformed inputs in minutes against a real deployment.

HTTP: raw requests of each class of fuzz_inputs.py, sent concurrently over asyncio sockets (so
any header byte can be sent). A refusal costs the gateway well under a millisecond, so the rate
is bounded by the client and the machine. Passing: every request gets an answer, never a 5xx
(503 shedding aside), and every 4xx carries the OpenAI error object.

gRPC: every method of every service (KV store, compute worker, scheduler, gRPC health),
with well-formed messages whose fields hold boundary values (integer extremes for their width,
NaN and infinities, long, adversarial and empty strings, unknown enum values), built from the
descriptors, so fields added later are fuzzed too. Passing: no UNKNOWN/INTERNAL (a servicer
that raised), no DEADLINE_EXCEEDED (a hang), no DATA_LOSS. Register/Deregister go to a scheduler
of their own (an accepted registration would join the deployment's pool).
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc

from .fuzz import CRASH
from .fuzz_inputs import CLASSES, generate


@dataclass
class ClassTally:
    inputs: int = 0
    statuses: dict = field(default_factory=dict)
    crashes: list = field(default_factory=list)  # first few, described
    crash_count: int = 0
    unclear: int = 0  # a 4xx without the {"error": {...}} body

    def saw(self, status, crash: str = "") -> None:
        self.inputs += 1
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
        if crash:
            self.crash_count += 1
            if len(self.crashes) < 5:
                self.crashes.append(crash)


async def _send(host: str, port: int, raw: bytes, timeout: float) -> tuple[int, bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _brief(raw: bytes) -> str:
    """The request line, the headers after the fixed ones, and the body's start."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    extra = [h for h in lines[1:] if not h.split(b":")[0] in (
        b"Host", b"Connection", b"Content-Type", b"Content-Length")]
    return repr(b" ".join([lines[0], *extra]) + b" " + body[:100] + b" ... " + body[-40:])


def _clear_error(body: bytes) -> bool:
    try:
        return set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    except (ValueError, KeyError, TypeError):
        return False


async def _http(host: str, port: int, per_class: int, api_key: str, concurrency: int,
                seed: int, timeout: float) -> dict[str, ClassTally]:
    tallies = {c: ClassTally() for c in CLASSES}
    jobs = [(c, i) for i in range(per_class) for c in CLASSES]
    rng = random.Random(seed)
    rng.shuffle(jobs)
    queue = iter(jobs)

    async def worker(n: int) -> None:
        local = random.Random(seed * 1000 + n)
        for cls, _ in queue:
            raw = generate(cls, local, api_key)
            try:
                status, body = await _send(host, port, raw, timeout)
            except (OSError, asyncio.TimeoutError, ValueError, IndexError) as exc:
                tallies[cls].saw("no answer", f"{type(exc).__name__} for {_brief(raw)}")
                continue
            crash = f"HTTP {status} for {_brief(raw)}" if status >= 500 and status != 503 else ""
            tallies[cls].saw(status, crash)
            if 400 <= status < 500 and not _clear_error(body):
                tallies[cls].unclear += 1

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return tallies


def fuzz_http_fast(host: str, port: int, per_class: int, api_key: str = "",
                   concurrency: int = 32, seed: int = 0,
                   timeout: float = 60.0) -> dict[str, ClassTally]:
    return asyncio.run(_http(host, port, per_class, api_key, concurrency, seed, timeout))


# -- gRPC: every method, boundary-valued messages from the descriptors ------------------------

from google.protobuf.descriptor import FieldDescriptor as F  # noqa: E402

INT_VALUES = {F.TYPE_INT32: [-2**31, 2**31 - 1, -1, 0, 1], F.TYPE_SINT32: [-2**31, 2**31 - 1],
              F.TYPE_SFIXED32: [-2**31, 2**31 - 1], F.TYPE_UINT32: [0, 1, 2**32 - 1, 2**31],
              F.TYPE_FIXED32: [0, 2**32 - 1], F.TYPE_INT64: [-2**63, 2**63 - 1, -1, 0],
              F.TYPE_SINT64: [-2**63, 2**63 - 1], F.TYPE_SFIXED64: [-2**63, 2**63 - 1],
              F.TYPE_UINT64: [0, 2**64 - 1, 2**63], F.TYPE_FIXED64: [0, 2**64 - 1]}
FLOATS = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, -0.0, 1e-45, 0.5]
STRINGS = ["", "../../etc/passwd", "a\0b", "x" * 5000, "ü/€/🙂", " ", "$(rm -rf /)",
           "127.0.0.1:1", "sessions/00/x.kv", "\u202e\ufeff"]


def _value(fd, rng: random.Random, depth: int):
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
                getattr(msg, fd.name).append(_value(fd, rng, depth))
            else:
                setattr(msg, fd.name, _value(fd, rng, depth))
    return msg


def _cheap_turn(turn, rng: random.Random) -> None:
    """A valid turn runs the model: at most two tokens."""
    turn.max_tokens = rng.randrange(3)
    turn.ignore_eos = False


def _services():
    from grpc_health.v1 import health_pb2

    from services.gen import compute_worker_pb2, kv_store_pb2, scheduler_pb2

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
    from services.grpc_util import channel

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


def summary(http: dict[str, ClassTally], grpc_: dict[str, ClassTally], seconds: float) -> dict:
    """The JSON figures of one run."""
    def part(tallies):
        return {k: {"inputs": t.inputs, "statuses": t.statuses, "crashes": t.crash_count,
                    "unclear_errors": t.unclear, "first_crashes": t.crashes}
                for k, t in sorted(tallies.items())}

    inputs = sum(t.inputs for t in (*http.values(), *grpc_.values()))
    return {"inputs": inputs, "duration_s": round(seconds, 1),
            "inputs_per_s": round(inputs / seconds, 1) if seconds else 0.0,
            "http_5xx_or_no_answer": sum(t.crash_count for t in http.values()),
            "http_unclear_errors": sum(t.unclear for t in http.values()),
            "grpc_unknown_internal_or_hang": sum(t.crash_count for t in grpc_.values()),
            "http": part(http), "grpc": part(grpc_)}


def fuzz_fast_live(http_per_class: int, grpc_per_method: int, turn_methods: int,
                   seed: int = 0, concurrency: int = 32, verbose: bool = False) -> dict:
    """A fresh embedded deployment and a scheduler of its own; the figures."""
    import sys
    import tempfile

    from scheduler.config import SchedulerConfig
    from scheduler.main import start as start_scheduler
    from services.launcher import LocalDeployment

    with tempfile.TemporaryDirectory(prefix="chaos-fuzz-fast-") as d:
        with LocalDeployment(data_dir=d, dram_bytes="4MiB", default_max_tokens=2) as dep:
            own, _ = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store="", workers=[]))
            try:
                start = time.perf_counter()
                http = fuzz_http_fast(dep.host, dep.gateway_port, http_per_class,
                                      concurrency=concurrency, seed=seed)
                if verbose:
                    print(f"[chaos] fast fuzz http: {sum(t.inputs for t in http.values())} "
                          f"inputs in {time.perf_counter() - start:.0f} s", file=sys.stderr,
                          flush=True)
                grpc_ = fuzz_grpc_fast({"store": dep.store_target, "worker": dep.worker_target,
                                        "scheduler": dep.scheduler_target},
                                       f"127.0.0.1:{own.port}", grpc_per_method, turn_methods,
                                       seed=seed)
                seconds = time.perf_counter() - start
            finally:
                own.stop(0)
            out = summary(http, grpc_, seconds)
            out["processes_died"] = [n for n, p in dep.procs if p.poll() is not None]
    return out
