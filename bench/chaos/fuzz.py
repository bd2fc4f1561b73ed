"""Property-based fuzzing (hypothesis) of every gRPC method with malformed, oversized,
out-of-range and adversarial inputs (the HTTP endpoints: fuzz_http.py; against a fresh
deployment: fuzz_live.py). A service passes when each input gets a clear status within a
deadline (never UNKNOWN/INTERNAL — an unhandled exception — never a hang), it stays healthy,
and a rejected write stores nothing.

The same functions serve the tests (tests/test_fuzz_*.py) and `bidaw chaos` (against a live
deployment). Each returns a Tally; `crashes` lists what broke."""
from __future__ import annotations

import grpc
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench.chaos.fuzz_judge import (ADVERSARIAL_IDS, SETTINGS, Tally, code_of, floats, fresh_id,
                                    i32s, judge, session_ids, stored, u32s, u64s)
from services.runtime.gen import (common_pb2, compute_worker_pb2, compute_worker_pb2_grpc,
                                  kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2,
                                  scheduler_pb2_grpc)
from services.runtime.grpc_util import channel


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
            code = code_of(call)
            judge(tally, f"KVStore.{what}({sid[:40]!r}, {secs}, {max_tokens})", code)

    @settings(max_examples=examples, **SETTINGS)
    @given(sid=session_ids, start=u32s, nbytes=u64s, secs=floats)
    def shm_writes(sid, start, nbytes, secs):
        fresh = fresh_id("shm", sid)
        code = code_of(lambda: stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
            session_id=fresh, start_token=start, num_bytes=nbytes, lease_seconds=secs),
            timeout=20))
        judge(tally, f"KVStore.PrepareShmWrite({nbytes}, {secs})", code)
        if stored(stub, fresh):
            tally.crashes.append(f"PrepareShmWrite alone stored KV for {fresh[:40]!r}")

    @settings(max_examples=examples, **SETTINGS)
    @given(w=write_st)
    def writes(w):
        fresh = fresh_id("w", w["sid"][:200])
        code = code_of(lambda: stub.WriteKV(iter(_write_chunks(fresh, w)), timeout=30))
        judge(tally, f"KVStore.WriteKV(consistent={w['consistent']})", code)
        if code != grpc.StatusCode.OK and stored(stub, fresh):
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
        judge(tally, f"KVStore.Awareness({len(events)} events)", code_of(call))

    for prop in (reads, shm_writes, writes, awareness):
        prop()
    judge(tally, "KVStore health after fuzzing",
           code_of(lambda: stub.Stats(kv_store_pb2.StoreStatsRequest(), timeout=20)))
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


# Turns the model answers, run before the draws: which drawn turns are valid depends on the draws
# (hypothesis's sequence differs with what ran before it in the process), these do not.
VALID_TURNS = tuple(common_pb2.TurnRequest(
    session_id=f"fz-valid-{i}", max_tokens=2,
    messages=[common_pb2.ChatMessage(role="user", content=text)])
    for i, text in enumerate(("Hi.", "naïve café?", "数学是什么？", "🙂" * 3, "x" * 300)))


def fuzz_scheduler(target: str, examples: int = 100, register: bool = True,
                   submit: bool = True) -> Tally:
    """SubmitTurn (and, with `register`, Register/Deregister and the session RPCs EndSession
    and PrepareSession: only against a scheduler of its own, as accepted registrations join
    the pool and an end frees a conversation)."""
    stub = scheduler_pb2_grpc.SchedulerStub(channel(target))
    tally = Tally()

    @settings(max_examples=examples, **SETTINGS)
    @given(turn=_turn_st(cheap=True), big=st.booleans(), mt=u32s)
    def submit_turns(turn, big, mt):
        if big:  # out-of-range max_tokens on an otherwise fine request: refused, not run
            turn = common_pb2.TurnRequest(session_id="fz", prompt_token_ids=[100],
                                          max_tokens=max(mt, 10**6))
        judge(tally, f"Scheduler.SubmitTurn({str(turn)[:120]!r})",
               code_of(lambda: stub.SubmitTurn(turn, timeout=120)))

    for turn in VALID_TURNS:
        submit_turns = example(turn=turn, big=False, mt=0)(submit_turns)

    @settings(max_examples=examples, **SETTINGS)
    @given(kind=st.integers(0, 5), address=st.one_of(
        st.sampled_from(ADVERSARIAL_IDS + ["127.0.0.1:1", "127.0.0.1:99999", ":80", "[::1]:x",
                                           "host:-1", "unix:/tmp/x"]), st.text(max_size=40)))
    def registration(kind, address):
        before = stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=20)
        reg = scheduler_pb2.Registration(kind=kind, address=address)
        code = code_of(lambda: stub.Register(reg, timeout=20))
        judge(tally, f"Scheduler.Register({kind}, {address[:40]!r})", code)
        after = stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=20)
        if code != grpc.StatusCode.OK and (after.workers, after.stores) != (before.workers,
                                                                           before.stores):
            tally.crashes.append(f"a refused Register({kind}, {address!r}) changed membership")
        judge(tally, "Scheduler.Deregister", code_of(lambda: stub.Deregister(reg, timeout=20)))

    @settings(max_examples=examples, **SETTINGS)
    @given(tenant=st.one_of(st.just(""), st.sampled_from(ADVERSARIAL_IDS), st.text(max_size=40)),
           sid=session_ids, scoped=st.booleans())
    def sessions(tenant, sid, scoped):
        sid = f"{tenant}/{sid}" if scoped else sid  # in its tenant's namespace, or not
        for name, make in (("EndSession", scheduler_pb2.EndSessionRequest),
                           ("PrepareSession", scheduler_pb2.PrepareSessionRequest)):
            request = make(tenant=tenant, session_id=sid)
            judge(tally, f"Scheduler.{name}({tenant[:20]!r}, {sid[:40]!r})",
                  code_of(lambda rpc=getattr(stub, name), r=request: rpc(r, timeout=20)))

    if submit:  # needs a worker: with none a valid turn waits (queued) until its deadline
        submit_turns()
    if register:
        registration()
        sessions()
    judge(tally, "Scheduler health after fuzzing",
           code_of(lambda: stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=20)))
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
        judge(tally, f"ComputeWorker.RunTurn({str(req)[:160]!r})",
               code_of(lambda: stub.RunTurn(req, timeout=120)))

    run_turn()
    judge(tally, "ComputeWorker health after fuzzing",
           code_of(lambda: stub.Info(compute_worker_pb2.WorkerInfoRequest(), timeout=20)))
    return tally
