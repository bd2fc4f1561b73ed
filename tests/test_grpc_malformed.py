"""Every gRPC method of the store, the scheduler and the worker, called over real servers with
malformed messages made by hand: strings that are not UTF-8, truncated bytes, varints past 2^32
where uint32 is expected, huge repeated fields, 100 KiB session ids, negative/NaN/infinite
floats, token ids past the vocabulary, WriteKV streams whose chunks lie about sizes. Each gets
a clear status with a message (never UNKNOWN, never INTERNAL), logs no traceback, and the store
is unchanged afterwards."""
from __future__ import annotations

import logging
import math
import os

import grpc
import pytest

from kv_store.config import StoreConfig
from kv_store.main import start as start_store
from scheduler.config import SchedulerConfig
from scheduler.main import start as start_scheduler
from services.runtime.gen import kv_store_pb2
from tests.raw_wire import BAD_UTF8, TRUNCATED, blob, f32, f64, status_of, uint

OK, INVALID = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT
CLEAR = {INVALID, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED,
         grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION}
HUGE_ID = b"s" * (100 << 10)
STORE, SCHED, WORKER = "/bidaw.v1.KVStore/", "/bidaw.v1.Scheduler/", "/bidaw.v1.ComputeWorker/"
UU, US, SU, SS = "unary_unary", "unary_stream", "stream_unary", "stream_stream"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    d = tmp_path_factory.mktemp("malformed")
    os.makedirs(d / "shm")
    store, core = start_store(StoreConfig(listen="127.0.0.1:0", data_dir=str(d / "kv"),
                                          dram_bytes=4 << 20, shm_dir=str(d / "shm")))
    store_target = f"127.0.0.1:{store.port}"
    code, detail = status_of(store_target, STORE + "WriteKV", SU, [  # a session to aim at
        header(session_id="sess", num_tokens=4, token_ids=[1, 2, 3, 4], bytes_per_token=8,
               format=1, model="m"), data(b"k" * 32, 0)])
    assert code == OK, detail
    sched, _ = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store=store_target,
                                               workers=[]))
    yield store_target, f"127.0.0.1:{sched.port}", core
    sched.stop(0)
    store.stop(0)


def store_state(core) -> dict:
    s = core.stats()
    return {k: s[k] for k in ("dram_bytes", "dram_sessions", "ssd_sessions", "leases",
                              "kv_bytes_written", "ssd_writes_pending")}


def assert_clear(code, detail, allowed=CLEAR):
    assert code in allowed, (code, detail)
    assert code == OK or detail and "Traceback" not in detail and "Exception" not in detail, detail


def no_tracebacks(caplog):
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records
                                                          if r.exc_info]


def header(**fields) -> bytes:
    return blob(1, kv_store_pb2.KVHeader(**fields).SerializeToString())


def data(payload: bytes, offset: int) -> bytes:
    return kv_store_pb2.KVChunk(data=payload, offset=offset).SerializeToString()


# -- bytes that do not parse -------------------------------------------------------------------

UNPARSABLE_STORE = [
    ("Lookup", UU, blob(1, BAD_UTF8)), ("ReadKV", US, blob(1, BAD_UTF8)),
    ("WriteKV", SU, [blob(1, blob(1, BAD_UTF8))]), ("Promote", UU, blob(1, BAD_UTF8)),
    ("ReleaseLease", UU, blob(1, BAD_UTF8)), ("Awareness", SS, [blob(1, blob(1, BAD_UTF8))]),
    ("Stats", UU, TRUNCATED), ("ShmInfo", UU, TRUNCATED),
    ("OpenShmRead", UU, blob(1, BAD_UTF8)), ("PrepareShmWrite", UU, blob(1, BAD_UTF8)),
    ("Lookup", UU, TRUNCATED),
    # a valid header, then a chunk that does not parse
    ("WriteKV", SU, [header(session_id="w", num_tokens=1, token_ids=[1], bytes_per_token=4,
                            format=1, model="m"), TRUNCATED]),
]
UNPARSABLE_SCHEDULER = [
    ("SubmitTurn", US, blob(1, BAD_UTF8) + blob(2, blob(1, b"user") + blob(2, b"hi"))),
    ("SubmitTurn", US, blob(1, b"s") + blob(2, blob(1, b"user") + blob(2, BAD_UTF8))),
    ("Stats", UU, TRUNCATED), ("Register", UU, uint(1, 1) + blob(2, BAD_UTF8)),
    ("Deregister", UU, uint(1, 1) + blob(2, BAD_UTF8)),
    ("PrepareSession", UU, blob(2, BAD_UTF8)), ("PrepareSession", UU, TRUNCATED),
]


@pytest.mark.parametrize("method,kind,payload", UNPARSABLE_STORE,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(UNPARSABLE_STORE)])
def test_store_answers_unparsable_requests_invalid_argument(servers, caplog, method, kind,
                                                            payload):
    target, _, core = servers
    before = store_state(core)
    with caplog.at_level(logging.INFO):
        code, detail = status_of(target, STORE + method, kind, payload)
    assert_clear(code, detail, {INVALID})
    assert "does not parse" in detail
    no_tracebacks(caplog)
    assert store_state(core) == before


@pytest.mark.parametrize("method,kind,payload", UNPARSABLE_SCHEDULER,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(UNPARSABLE_SCHEDULER)])
def test_scheduler_answers_unparsable_requests_invalid_argument(servers, caplog, method, kind,
                                                                payload):
    _, target, _ = servers
    with caplog.at_level(logging.INFO):
        code, detail = status_of(target, SCHED + method, kind, payload)
    assert_clear(code, detail, {INVALID})
    no_tracebacks(caplog)


# -- values that parse but are out of range ----------------------------------------------------

NAN, INF = math.nan, math.inf
OUT_OF_RANGE_STORE = [
    ("Lookup", UU, blob(1, HUGE_ID)), ("ReadKV", US, blob(1, HUGE_ID)),
    ("Promote", UU, blob(1, HUGE_ID)), ("OpenShmRead", UU, blob(1, HUGE_ID)),
    ("PrepareShmWrite", UU, blob(1, HUGE_ID) + uint(3, 64)),
    ("WriteKV", SU, [blob(1, blob(1, HUGE_ID) + uint(3, 1) + blob(4, b"\x01") +
                          uint(6, 4))]),
    # leases: negative, NaN and infinite lifetimes would never (or at once) expire
    *[("Lookup", UU, blob(1, b"sess") + uint(2, 1) + f64(3, x)) for x in (NAN, -1.0, INF)],
    *[("OpenShmRead", UU, blob(1, b"sess") + f64(3, x)) for x in (NAN, -5.0, INF)],
    *[("PrepareShmWrite", UU, blob(1, b"sess") + uint(2, 4) + uint(3, 64) + f64(4, x))
      for x in (NAN, -5.0, INF)],
    # past 2^32, and a huge uint64
    ("ReadKV", US, blob(1, b"sess") + uint(2, (1 << 40) + 3)),  # at most 2^40 + 3: all of it
    ("PrepareShmWrite", UU, blob(1, b"sess") + uint(2, 1 << 33) + uint(3, (1 << 64) - 1)),
    ("PrepareShmWrite", UU, blob(1, b"sess") + uint(3, 1 << 63)),
    # huge repeated field: 1M token ids that do not match num_tokens
    ("WriteKV", SU, [header(session_id="big", num_tokens=3, token_ids=list(range(1 << 20)),
                            bytes_per_token=4, format=1, model="m")]),
    # a header whose size overflows what one turn may write
    ("WriteKV", SU, [header(session_id="big", num_tokens=1, token_ids=[1],
                            bytes_per_token=(1 << 64) - 1, format=1, model="m")]),
]


def _lying_writes() -> list[list[bytes]]:
    h = header(session_id="liar", num_tokens=2, token_ids=[5, 6], bytes_per_token=8,
               format=1, model="m")  # 16 bytes promised
    return [[h, data(b"x" * 24, 0)],                     # more than promised
            [h, data(b"x" * 8, 0)],                      # fewer, then the stream ends
            [h, data(b"x" * 8, 0), data(b"x" * 8, 4)],   # overlapping offsets
            [h, data(b"x" * 8, 0), data(b"x" * 8, 9)],   # a gap
            [h, data(b"x" * 8, 1 << 40)],                # an offset far past the end
            [h, h],                                       # a second header
            [data(b"x" * 16, 0)],                         # no header
            []]                                           # nothing at all


@pytest.mark.parametrize("method,kind,payload", OUT_OF_RANGE_STORE,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(OUT_OF_RANGE_STORE)])
def test_store_refuses_out_of_range_values_clearly_and_changes_nothing(servers, caplog, method,
                                                                       kind, payload):
    target, _, core = servers
    before = store_state(core)
    with caplog.at_level(logging.INFO):
        code, detail = status_of(target, STORE + method, kind, payload)
    assert_clear(code, detail, CLEAR | {OK} if method == "ReadKV" else CLEAR)
    no_tracebacks(caplog)
    assert store_state(core) == before


PAST_32_BITS_STORE = [  # as int32/uint32 these kept their low bits: token 0, start 0, answer 0
    ("WriteKV", SU, [header(session_id="w40", num_tokens=2, token_ids=[1, 1 << 40],
                            bytes_per_token=4, format=1, model="m"), data(b"k" * 8, 0)],
     "header.token_ids"),
    ("WriteKV", SU, [header(session_id="w40", num_tokens=1, token_ids=[-7], bytes_per_token=4,
                            format=1, model="m"), data(b"k" * 4, 0)], "header.token_ids"),
    ("WriteKV", SU, [header(session_id="w40", start_token=1 << 40, num_tokens=1, token_ids=[1],
                            bytes_per_token=4, format=1, model="m"), data(b"k" * 4, 0)],
     "header.start_token"),
    ("Awareness", SS, [blob(3, blob(1, b"sess") + uint(2, 1 << 40))],
     "turn_complete.answer_tokens"),
]


@pytest.mark.parametrize("method,kind,payload,field", PAST_32_BITS_STORE,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(PAST_32_BITS_STORE)])
def test_store_refuses_integers_past_32_bits_naming_the_field(servers, caplog, method, kind,
                                                              payload, field):
    target, _, core = servers
    before = store_state(core)
    with caplog.at_level(logging.INFO):
        code, detail = status_of(target, STORE + method, kind, payload)
    assert code == INVALID, (code, detail)
    assert detail.startswith(field), detail
    no_tracebacks(caplog)
    assert store_state(core) == before
    code, _ = status_of(target, STORE + "ReadKV", US, blob(1, b"w40"))
    assert code == grpc.StatusCode.NOT_FOUND  # nothing of it was kept


@pytest.mark.parametrize("chunks", _lying_writes(), ids=range(len(_lying_writes())))
def test_a_write_whose_chunks_lie_about_sizes_is_refused_and_stores_nothing(servers, chunks):
    target, _, core = servers
    before = store_state(core)
    code, detail = status_of(target, STORE + "WriteKV", SU, chunks)
    assert_clear(code, detail, {INVALID})
    assert store_state(core) == before
    code, _ = status_of(target, STORE + "ReadKV", US, blob(1, b"liar"))
    assert code == grpc.StatusCode.NOT_FOUND  # nothing of it was kept


def turn(*extra: bytes, session: bytes = b"t1") -> bytes:
    return blob(1, session) + blob(2, blob(1, b"user") + blob(2, b"hello")) + b"".join(extra)


UNAVAILABLE = grpc.StatusCode.UNAVAILABLE  # no worker registered: a valid turn gets this
OUT_OF_RANGE_SCHEDULER = [
    ("SubmitTurn", US, turn(session=HUGE_ID), {INVALID}),
    *[("SubmitTurn", US, turn(f32(5, x)), {INVALID}) for x in (NAN, -1.0, INF)],  # temperature
    ("SubmitTurn", US, turn(uint(4, (1 << 40) + 99999)), {INVALID}),  # max_tokens, low bits
    ("SubmitTurn", US, turn(uint(4, 1 << 40)), {INVALID}),  # 64-bit on the wire: not cut to 0
    ("SubmitTurn", US, turn(b"".join(blob(2, blob(1, b"user") + blob(2, b"x"))
                                     for _ in range(1 << 18))), {UNAVAILABLE}),  # 256 Ki msgs
    ("SubmitTurn", US, blob(1, b"t") + blob(3, b"\x01" * (5 << 20)),
     {grpc.StatusCode.RESOURCE_EXHAUSTED}),  # past the message size limit
    ("SubmitTurn", US, blob(1, b"t") + blob(2, blob(1, b"robot") + blob(2, b"x")), {INVALID}),
    ("Register", UU, uint(1, 7) + blob(2, b"127.0.0.1:1"), {INVALID}),
    ("Register", UU, uint(1, 1) + blob(2, HUGE_ID), CLEAR),
    ("Deregister", UU, uint(1, 2) + blob(2, b"not an address"), CLEAR),
    ("PrepareSession", UU, blob(2, HUGE_ID), {INVALID}),
    ("PrepareSession", UU, blob(1, b"t") + blob(2, b"u/x"), {INVALID}),  # another tenant's
]


# Integers past 32 bits, where a 32-bit field would have kept only the low bits (0 here, a valid
# token id, the default max_tokens, top_k off) and run the turn; and a tenant or stop list the
# gateway could never send. Each is refused naming its field.
PAST_32_BITS = [
    ("prompt_token_ids", blob(1, b"t") + uint(3, 5) + uint(3, 1 << 40)),
    ("prompt_token_ids", blob(1, b"t") + uint(3, -1)),
    ("max_tokens", turn(uint(4, 1 << 40))),
    ("top_k", turn(uint(18, 1 << 40))),
    ("min_tokens", turn(uint(19, 1 << 40))),
    ("min_tokens", turn(uint(4, 5), uint(19, 6))),  # above max_tokens
    ("logit_bias", turn(blob(15, uint(1, 1 << 40) + f32(2, 1.0)))),
    ("tenant", turn(blob(8, b"a/b"))),
    ("tenant", turn(blob(8, b"t" * 65))),
    ("stop", turn(*[blob(7, b"x")] * 17)),
]


@pytest.mark.parametrize("field,payload", PAST_32_BITS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(PAST_32_BITS)])
def test_scheduler_refuses_integers_past_32_bits_naming_the_field(servers, caplog, field,
                                                                  payload):
    _, target, _ = servers
    with caplog.at_level(logging.INFO):
        code, detail = status_of(target, SCHED + "SubmitTurn", US, payload)
    assert code == INVALID, (code, detail)
    assert detail.startswith(field), detail
    no_tracebacks(caplog)


@pytest.mark.parametrize("method,kind,payload,allowed", OUT_OF_RANGE_SCHEDULER,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(OUT_OF_RANGE_SCHEDULER)])
def test_scheduler_refuses_out_of_range_values_clearly(servers, caplog, method, kind, payload,
                                                       allowed):
    _, target, _ = servers
    with caplog.at_level(logging.INFO):
        code, detail = status_of(target, SCHED + method, kind, payload)
    assert_clear(code, detail, allowed)
    no_tracebacks(caplog)


# -- the worker and a live turn (the real model) ----------------------------------------------

def worker_turn(turn_bytes: bytes, *extra: bytes) -> bytes:
    return blob(1, b"req") + blob(2, turn_bytes) + b"".join(extra)


def test_worker_and_live_turns_refuse_malformed_requests(deployment):
    vocab_past = uint(3, 49152 + 7)  # one prompt token id past SmolLM2's 49152
    ids_only = blob(1, b"live") + vocab_past + uint(4, 2)
    cases = [
        (WORKER + "RunTurn", US, worker_turn(blob(1, BAD_UTF8) + blob(2, blob(1, b"user") +
                                                                      blob(2, b"x"))), {INVALID}),
        (WORKER + "Info", UU, TRUNCATED, {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(ids_only), {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(blob(1, b"neg") + uint(3, -3) + uint(4, 2)),
         {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(blob(1, b"big") + uint(3, 1 << 40) + uint(4, 2)),
         {INVALID}),  # as int32 it was token 0, and the turn ran
        (WORKER + "RunTurn", US, worker_turn(turn(session=HUGE_ID)), {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(turn(uint(4, 2)), f64(3, NAN)), {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(turn(uint(4, 2)), f64(4, -INF)), {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(turn(uint(4, 2), f32(5, NAN))), {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(turn(uint(4, 2), f32(12, NAN))), {INVALID}),
        (WORKER + "RunTurn", US, worker_turn(turn(uint(4, 2), f32(5, 7.5))), {INVALID}),
        (SCHED + "SubmitTurn", US, ids_only, {INVALID}),
        (SCHED + "SubmitTurn", US, blob(1, b"neg") + uint(3, -1) + uint(4, 2), {INVALID}),
    ]
    for method, kind, payload, allowed in cases:
        target = (deployment.worker_target if method.startswith(WORKER)
                  else deployment.scheduler_target)
        code, detail = status_of(target, method, kind, payload, timeout=120)
        assert code in allowed, (method, payload[:40], code, detail)
        assert code == OK or ("Traceback" not in detail and detail), detail
    assert all(p.poll() is None for _, p in deployment.procs)  # nothing crashed
    # and the worker still serves a valid turn
    code, detail = status_of(deployment.worker_target, WORKER + "RunTurn", US,
                             worker_turn(turn(uint(4, 2))), timeout=120)
    assert code == OK, detail
