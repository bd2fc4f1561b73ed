"""Property-based fuzzing (hypothesis) of every gRPC method and HTTP endpoint with malformed,
oversized, out-of-range and adversarial inputs. A service passes when each input gets a clear
status within a deadline (never UNKNOWN/INTERNAL — an unhandled exception — never a hang,
never a 5xx other than deliberate 503 shedding), it stays healthy, and a rejected write stores nothing.

The same functions serve the tests (tests/test_fuzz_*.py) and `bidaw chaos` (against a live
deployment). Each returns a Tally; `crashes` lists what broke."""
from __future__ import annotations

import http.client
import json
import uuid
from dataclasses import dataclass, field

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.runtime.gen import (common_pb2, compute_worker_pb2, compute_worker_pb2_grpc, kv_store_pb2,
                          kv_store_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc)
from services.runtime.grpc_util import channel

# A crash: the servicer raised (UNKNOWN/INTERNAL), or the call hung (DEADLINE_EXCEEDED).
CRASH = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED,
         grpc.StatusCode.DATA_LOSS}
U32, U64, I32 = 2**32 - 1, 2**64 - 1, 2**31 - 1

ADVERSARIAL_IDS = ["../../etc/passwd", "/etc/passwd", "a/../../b", "..", ".", "", "\0", "a\0b",
                   "sess\\..\\x", "%2e%2e%2f", "sessions/00/x.kv", "x" * 5000, "ü/€/🙂",
                   "CON", " ", "\n", "*", "$(rm -rf /)", "'; DROP TABLE s;--"]
session_ids = st.one_of(st.sampled_from(ADVERSARIAL_IDS), st.text(max_size=64),
                        st.text(min_size=300, max_size=2000))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([-1.0, 0.0, 1e308, -1e308, 1e-308]))
u32s = st.one_of(st.integers(0, U32), st.sampled_from([0, 1, U32, U32 - 1, 2**31]))
u64s = st.one_of(st.integers(0, U64), st.sampled_from([0, 1, U64, 2**63, 2**40]))
i32s = st.one_of(st.integers(-2**31, I32), st.sampled_from([-1, 0, 49151, 49152, I32, -2**31]))
SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


@dataclass
class Tally:
    inputs: int = 0
    crashes: list[str] = field(default_factory=list)
    statuses: dict = field(default_factory=dict)  # status (gRPC code name or HTTP) -> count

    def saw(self, status) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def add(self, other: "Tally") -> "Tally":
        self.inputs += other.inputs
        self.crashes += other.crashes
        for k, v in other.statuses.items():
            self.statuses[k] = self.statuses.get(k, 0) + v
        return self


def _code(call) -> grpc.StatusCode:
    try:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            for _ in result:
                pass
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def _judge(tally: Tally, what: str, code: grpc.StatusCode, detail: str = "") -> None:
    tally.inputs += 1
    tally.saw(code.name)
    if code in CRASH:
        tally.crashes.append(f"{what}: {code.name} {detail[:200]}")


def _fresh(prefix: str, sid: str) -> str:
    """A unique session id that still carries the adversarial part."""
    return f"fz{uuid.uuid4().hex[:8]}{prefix}{sid}"


def _stored(store, sid: str) -> bool:
    try:
        r = store.Lookup(kv_store_pb2.LookupRequest(session_id=sid), timeout=10)
    except grpc.RpcError:
        return False
    return r.tier not in (common_pb2.TIER_NONE, common_pb2.TIER_UNSPECIFIED)


# -- KV store -------------------------------------------------------------------------------

header_st = st.builds(
    dict, start_token=u32s, num_tokens=u32s, token_ids=st.lists(i32s, max_size=40),
    format=st.integers(-3, 5), bytes_per_token=st.one_of(u64s, st.integers(0, 64)),
    model=st.text(max_size=20), tier=st.integers(-2, 6),
    shm_region=st.one_of(st.just(""), st.sampled_from(ADVERSARIAL_IDS)),
    allow_async=st.booleans())
chunk_st = st.tuples(st.binary(max_size=300), u64s)
write_st = st.fixed_dictionaries({
    "sid": session_ids, "header": header_st,
    "headers": st.integers(0, 2),              # none, one, or a duplicated header
    "header_last": st.booleans(),              # the header after the data
    "chunks": st.lists(chunk_st, max_size=6),  # data with arbitrary (out-of-order) offsets
    "consistent": st.booleans()})              # make lengths and offsets agree (a valid write)


def _write_chunks(sid: str, w: dict) -> list:
    h = dict(w["header"])
    chunks = list(w["chunks"])
    if w["consistent"]:
        n = len(h["token_ids"]) or 1
        h.update(token_ids=h["token_ids"] or [7], num_tokens=n, start_token=0,
                 bytes_per_token=h["bytes_per_token"] % 64 + 1, shm_region="",
                 format=common_pb2.KV_FORMAT_KV, tier=0)
        data = bytes(range(256)) * (n * h["bytes_per_token"] // 256 + 1)
        data = data[:n * h["bytes_per_token"]]
        chunks = [(data[i:i + 100], i) for i in range(0, len(data), 100)]
    header = kv_store_pb2.KVChunk(header=kv_store_pb2.KVHeader(
        session_id=sid, **h))
    out = [kv_store_pb2.KVChunk(data=d, offset=o) for d, o in chunks]
    if w["consistent"]:
        return [header, *out]
    heads = [header] * w["headers"]
    return [*out, *heads] if w["header_last"] else [*heads, *out]


def fuzz_store(target: str, examples: int = 100) -> Tally:
    stub = kv_store_pb2_grpc.KVStoreStub(channel(target))
    tally = Tally()

    @settings(max_examples=examples, **SETTINGS)
    @given(sid=session_ids, lease=st.booleans(), secs=floats, max_tokens=u32s)
    def reads(sid, lease, secs, max_tokens):
        for what, call in (
                ("Lookup", lambda: stub.Lookup(kv_store_pb2.LookupRequest(
                    session_id=sid, lease=lease, lease_seconds=secs), timeout=20)),
                ("ReadKV", lambda: stub.ReadKV(kv_store_pb2.ReadKVRequest(
                    session_id=sid, max_tokens=max_tokens), timeout=20)),
                ("Promote", lambda: stub.Promote(kv_store_pb2.PromoteRequest(session_id=sid),
                                                 timeout=20)),
                ("ReleaseLease", lambda: stub.ReleaseLease(kv_store_pb2.ReleaseLeaseRequest(
                    lease_id=sid), timeout=20)),
                ("OpenShmRead", lambda: stub.OpenShmRead(kv_store_pb2.OpenShmReadRequest(
                    session_id=sid, max_tokens=max_tokens, lease_seconds=secs), timeout=20))):
            code = _code(call)
            _judge(tally, f"KVStore.{what}({sid[:40]!r}, {secs}, {max_tokens})", code)

    @settings(max_examples=examples, **SETTINGS)
    @given(sid=session_ids, start=u32s, nbytes=u64s, secs=floats)
    def shm_writes(sid, start, nbytes, secs):
        fresh = _fresh("shm", sid)
        code = _code(lambda: stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
            session_id=fresh, start_token=start, num_bytes=nbytes, lease_seconds=secs),
            timeout=20))
        _judge(tally, f"KVStore.PrepareShmWrite({nbytes}, {secs})", code)
        if _stored(stub, fresh):
            tally.crashes.append(f"PrepareShmWrite alone stored KV for {fresh[:40]!r}")

    @settings(max_examples=examples, **SETTINGS)
    @given(w=write_st)
    def writes(w):
        fresh = _fresh("w", w["sid"][:200])
        code = _code(lambda: stub.WriteKV(iter(_write_chunks(fresh, w)), timeout=30))
        _judge(tally, f"KVStore.WriteKV(consistent={w['consistent']})", code)
        if code != grpc.StatusCode.OK and _stored(stub, fresh):
            tally.crashes.append(f"a rejected WriteKV ({code.name}) stored KV for {fresh[:40]!r}")

    @settings(max_examples=max(5, examples // 5), **SETTINGS)
    @given(events=st.lists(st.one_of(
        st.builds(lambda c: kv_store_pb2.ComputeEvent(hello=kv_store_pb2.Hello(client_id=c)),
                  st.text(max_size=30)),
        st.builds(lambda s: kv_store_pb2.ComputeEvent(arrival=kv_store_pb2.Arrival(
            session_id=s)), session_ids),
        st.builds(lambda s, a: kv_store_pb2.ComputeEvent(
            turn_complete=kv_store_pb2.TurnComplete(session_id=s, answer_tokens=a)),
            session_ids, u32s),
        st.just(kv_store_pb2.ComputeEvent())), max_size=8))
    def awareness(events):
        def call():
            stream = stub.Awareness(iter(events), timeout=5)
            try:
                next(stream)  # the snapshot, then hang up
            except StopIteration:
                pass
            stream.cancel()
        _judge(tally, f"KVStore.Awareness({len(events)} events)", _code(call))

    for prop in (reads, shm_writes, writes, awareness):
        prop()
    _judge(tally, "KVStore health after fuzzing",
           _code(lambda: stub.Stats(kv_store_pb2.StoreStatsRequest(), timeout=20)))
    return tally


# -- scheduler and compute worker ---------------------------------------------------------

def _turn_st(cheap: bool):
    """TurnRequests; `cheap` keeps answers to <= 2 tokens (valid ones run the real model)."""
    return st.builds(
        lambda sid, msgs, ids, mt, temp, eos, stop, seed: common_pb2.TurnRequest(
            session_id=sid, messages=msgs, prompt_token_ids=ids, max_tokens=mt,
            temperature=temp, ignore_eos=eos, stop=stop, seed=seed),
        session_ids,
        st.lists(st.builds(lambda r, c: common_pb2.ChatMessage(role=r, content=c),
                           st.one_of(st.sampled_from(["user", "system", "assistant"]),
                                     st.text(max_size=10)),
                           st.one_of(st.text(max_size=50), st.just("x" * 20000))), max_size=3),
        st.lists(i32s, max_size=20),
        st.integers(0, 2) if cheap else u32s,
        st.floats(width=32, allow_nan=True, allow_infinity=True),
        st.booleans(), st.lists(st.text(max_size=5), max_size=3), u64s)


def fuzz_scheduler(target: str, examples: int = 100, register: bool = True,
                   submit: bool = True) -> Tally:
    """SubmitTurn (and, with `register`, Register/Deregister: only against a scheduler of its
    own, as accepted registrations join the pool)."""
    stub = scheduler_pb2_grpc.SchedulerStub(channel(target))
    tally = Tally()

    @settings(max_examples=examples, **SETTINGS)
    @given(turn=_turn_st(cheap=True), big=st.booleans(), mt=u32s)
    def submit_turns(turn, big, mt):
        if big:  # out-of-range max_tokens on an otherwise fine request: refused, not run
            turn = common_pb2.TurnRequest(session_id="fz", prompt_token_ids=[100],
                                          max_tokens=max(mt, 10**6))
        _judge(tally, f"Scheduler.SubmitTurn({str(turn)[:120]!r})",
               _code(lambda: stub.SubmitTurn(turn, timeout=120)))

    @settings(max_examples=examples, **SETTINGS)
    @given(kind=st.integers(0, 5), address=st.one_of(
        st.sampled_from(ADVERSARIAL_IDS + ["127.0.0.1:1", "127.0.0.1:99999", ":80", "[::1]:x",
                                           "host:-1", "unix:/tmp/x"]), st.text(max_size=40)))
    def registration(kind, address):
        before = stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=20)
        reg = scheduler_pb2.Registration(kind=kind, address=address)
        code = _code(lambda: stub.Register(reg, timeout=20))
        _judge(tally, f"Scheduler.Register({kind}, {address[:40]!r})", code)
        after = stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=20)
        if code != grpc.StatusCode.OK and (after.workers, after.stores) != (before.workers,
                                                                           before.stores):
            tally.crashes.append(f"a refused Register({kind}, {address!r}) changed membership")
        _judge(tally, "Scheduler.Deregister", _code(lambda: stub.Deregister(reg, timeout=20)))

    if submit:  # needs a worker: with none a valid turn waits (queued) until its deadline
        submit_turns()
    if register:
        registration()
    _judge(tally, "Scheduler health after fuzzing",
           _code(lambda: stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=20)))
    return tally


def fuzz_worker(target: str, store_target: str, examples: int = 50) -> Tally:
    stub = compute_worker_pb2_grpc.ComputeWorkerStub(channel(target))
    tally = Tally()

    @settings(max_examples=examples, **SETTINGS)
    @given(turn=_turn_st(cheap=True), rid=st.text(max_size=30), q=floats, stores=st.lists(
        st.one_of(st.just(store_target), st.sampled_from(ADVERSARIAL_IDS + ["127.0.0.1:1"])),
        max_size=2))
    def run_turn(turn, rid, q, stores):
        req = compute_worker_pb2.WorkerTurnRequest(request_id=rid, turn=turn, queue_s=q,
                                                   since_arrival_s=q, kv_stores=stores)
        _judge(tally, f"ComputeWorker.RunTurn({str(req)[:160]!r})",
               _code(lambda: stub.RunTurn(req, timeout=120)))

    run_turn()
    _judge(tally, "ComputeWorker health after fuzzing",
           _code(lambda: stub.Info(compute_worker_pb2.WorkerInfoRequest(), timeout=20)))
    return tally


# -- HTTP gateway -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
    st.text(max_size=30), lambda kids: st.lists(kids, max_size=4) |
    st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
good_messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "user", "system", "assistant", "tool", "x"]),
     "content": st.one_of(st.text(max_size=40), st.text(max_size=40), json_values)}),
    min_size=1, max_size=3)
chat_bodies = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["smollm2-135m"] * 4 + ["", "gpt-4"]), json_values),
     "messages": st.one_of(good_messages, good_messages, json_values),
     "prompt": st.one_of(st.text(max_size=40), st.text(max_size=40), json_values)},
    optional={"max_tokens": st.one_of(st.integers(-5, 2), st.integers(-2**63, 2**63),
                                      json_values),
              "max_completion_tokens": st.integers(-5, 2), "temperature": json_values,
              "stream": json_values, "n": json_values, "stop": json_values,
              "user": session_ids, "seed": json_values})
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=300)


def fuzz_http(host: str, port: int, examples: int = 100, api_key: str = "") -> Tally:
    tally = Tally()
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def request(method: str, path: str, body: bytes | None, headers: dict) -> int:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers)
            reply = conn.getresponse()
            reply.read()
            return reply.status
        finally:
            conn.close()

    def judge(what: str, method: str, path: str, body: bytes | None, headers: dict) -> None:
        tally.inputs += 1
        try:
            status = request(method, path, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            tally.crashes.append(f"{what}: no HTTP answer ({type(exc).__name__}: {exc})")
            return
        tally.saw(status)
        if status >= 500 and status not in (503,):
            tally.crashes.append(f"{what}: HTTP {status}")

    @settings(max_examples=examples, **SETTINGS)
    @given(body=chat_bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
           sid=header_text, stream=st.booleans())
    def json_bodies(body, path, sid, stream):
        if isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 2:
            body["max_tokens"] = 2  # valid requests run the real model: keep them short
        body.setdefault("max_tokens", 2)
        if stream:
            body["stream"] = True
        judge(f"POST {path} {json.dumps(body)[:160]}", "POST", path, json.dumps(body).encode(),
              {"Content-Type": "application/json", "X-Session-Id": sid, **auth})

    @settings(max_examples=examples, **SETTINGS)
    @given(raw=st.one_of(st.binary(max_size=200), st.just(b"{" * 5000), st.just(b"[]"),
                         st.just(b'{"model": "smollm2-135m", "messages": [')),
           method=st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"]),
           path=st.one_of(st.sampled_from(["/v1/chat/completions", "/v1/completions",
                                           "/v1/models", "/health", "/metrics", "/",
                                           "/v1/../../etc/passwd", "/v1/models/%00",
                                           "/" + "a" * 5000]),
                          st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e),
                                  max_size=40).map(lambda p: "/" + p)),
           length=st.one_of(st.none(), st.sampled_from(["-1", "99999999999", "abc", "0"])))
    def raw_bytes(raw, method, path, length):
        headers = {"Content-Type": "application/json", **auth}
        if length is not None:
            headers["Content-Length"] = length
        judge(f"{method} {path[:60]} {raw[:40]!r} (Content-Length {length})", method, path,
              raw if method not in ("GET",) else None, headers)

    @settings(max_examples=max(5, examples // 4), **SETTINGS)
    @given(sid=header_text, user=session_ids, text=st.text(max_size=60),
           path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
           stream=st.booleans())
    def valid_bodies(sid, user, text, path, stream):
        """Well-formed requests (they run the model) with adversarial session ids."""
        body = {"model": "smollm2-135m", "max_tokens": 2, "stream": stream, "user": user}
        if path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": text or "hi"}]
        else:
            body["prompt"] = text or "hi"
        judge(f"POST {path} session {sid[:40]!r} user {user[:40]!r}", "POST", path,
              json.dumps(body).encode(),
              {"Content-Type": "application/json", "X-Session-Id": sid, **auth})

    json_bodies()
    raw_bytes()
    valid_bodies()
    judge("POST oversized body (9 MB)", "POST", "/v1/chat/completions",
          b'{"messages": [{"role": "user", "content": "' + b"x" * (9 << 20) + b'"}]}',
          {"Content-Type": "application/json", **auth})
    judge("GET /health after fuzzing", "GET", "/health", None, {})
    return tally


def fuzz_live(examples: int = 100, verbose: bool = False) -> tuple[int, int, list[str]]:
    """Fuzz a fresh embedded deployment (store, worker, scheduler, gateway) and, for Register,
    a scheduler of its own; (inputs, crashes, what crashed)."""
    import sys
    import tempfile

    from scheduler.config import SchedulerConfig
    from scheduler.main import start as start_scheduler
    from services.launch.launcher import LocalDeployment

    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="chaos-fuzz-") as d:
        # Unsupervised: a crash must show as a dead process, not be healed behind our back.
        with LocalDeployment(data_dir=d, dram_bytes="4MiB", default_max_tokens=2,
                             supervise=False) as dep:
            for name, run in (
                    ("store", lambda: fuzz_store(dep.store_target, examples)),
                    ("scheduler", lambda: fuzz_scheduler(dep.scheduler_target, examples,
                                                         register=False)),
                    ("worker", lambda: fuzz_worker(dep.worker_target, dep.store_target,
                                                   max(10, examples // 4))),
                    ("http", lambda: fuzz_http(dep.host, dep.gateway_port, examples))):
                t = run()
                if verbose:
                    print(f"[chaos] fuzz {name}: {t.inputs} inputs, {len(t.crashes)} crashes",
                          file=sys.stderr, flush=True)
                tally.add(t)
            alive = {n: p.poll() is None for n, p in dep.procs}
            tally.crashes += [f"{n} process died during fuzzing" for n, a in alive.items()
                              if not a]
        server, _ = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store="",
                                                    workers=[]))
        try:
            tally.add(fuzz_scheduler(f"127.0.0.1:{server.port}", examples, submit=False))
        finally:
            server.stop(0)
    for c in tally.crashes:
        if verbose:
            print(f"[chaos] fuzz crash: {c}", file=sys.stderr, flush=True)
    return tally.inputs, len(tally.crashes), tally.crashes
