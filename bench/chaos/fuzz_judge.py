"""What the property-based fuzzers (fuzz.py, fuzz_http.py) share: the adversarial values and
strategies, the hypothesis settings, and how an answer is judged: a crash is a status meaning
the servicer raised or hung; each fuzzer returns a Tally of what it saw."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import grpc
from hypothesis import HealthCheck
from hypothesis import strategies as st

from services.runtime.gen import common_pb2, kv_store_pb2

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


def code_of(call) -> grpc.StatusCode:
    try:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            for _ in result:
                pass
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def judge(tally: Tally, what: str, code: grpc.StatusCode, detail: str = "") -> None:
    tally.inputs += 1
    tally.saw(code.name)
    if code in CRASH:
        tally.crashes.append(f"{what}: {code.name} {detail[:200]}")


def fresh_id(prefix: str, sid: str) -> str:
    """A unique session id that still carries the adversarial part."""
    return f"fz{uuid.uuid4().hex[:8]}{prefix}{sid}"


def stored(store, sid: str) -> bool:
    try:
        r = store.Lookup(kv_store_pb2.LookupRequest(session_id=sid), timeout=10)
    except grpc.RpcError:
        return False
    return r.tier not in (common_pb2.TIER_NONE, common_pb2.TIER_UNSPECIFIED)
