"""`bidaw chaos`'s security and long-turn faults, run for real mid-replay: an attacker without
the cluster token is refused on every method and changes nothing; a turn whose first token
comes after a wait carrying only keepalive pings (1-s pings and an 8-s wait here, 10-s pings
and 540 s by default) is answered, with no GOAWAY anywhere."""
from __future__ import annotations

import pytest

from bench.chaos.faults.long_wait import WAIT_ENV
from bench.chaos.reference import Reference
from bench.chaos.runner import run_fault
from services.runtime.grpc_util import KEEPALIVE_ENV


@pytest.fixture(scope="module")
def reference():
    return Reference()


def _clean(result: dict, turns: int) -> None:
    assert result["problems"] == []
    assert result["injected"] == 1
    assert result["turns"] == turns
    assert result["wrong_answers"] == 0 and result["lost_acknowledged_kv"] == 0
    assert result["errors"] == 0


def test_attacker_calls_every_internal_rpc_and_is_refused(reference, tmp_path):
    result = run_fault("attacker", turns=4, reference=reference, workdir=str(tmp_path))
    _clean(result, 4)
    assert result["checks"]["calls_refused"] == result["checks"]["calls_attempted"] >= 32


def test_a_turn_waiting_past_many_keepalive_pings_is_answered(reference, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv(KEEPALIVE_ENV, "1")  # inherited by every service of the topology
    monkeypatch.setenv(WAIT_ENV, "8")  # 8+ pings on each hop; the old servers cut after ~3
    # the replay's 4 turns and the long one (checked against the recompute like them)
    result = run_fault("long-wait", turns=4, reference=reference, workdir=str(tmp_path))
    _clean(result, 5)
    assert result["checks"]["first_token_s"] >= 8
