"""Faults during a live replay of real conversations (bench/chaos): kill -9 of the KV store
(restarted on the same data directory) and of the scheduler (restarted; clients retry). Every
answer equals the in-process recompute, token for token; no acknowledged KV is lost (durable
probe writes read back byte for byte; KV on SSD before the kill is there after it)."""
from __future__ import annotations

import pytest

from bench.chaos.reference import Reference
from bench.chaos.runner import run_fault


@pytest.fixture(scope="module")
def reference():
    return Reference()


@pytest.mark.parametrize("fault", ["store-kill", "scheduler-kill"])
def test_fault_mid_replay_gives_right_answers_and_loses_no_acknowledged_kv(fault, reference,
                                                                           tmp_path):
    result = run_fault(fault, turns=8, reference=reference, workdir=str(tmp_path))
    assert result["problems"] == []
    assert result["injected"] >= 1
    assert result["turns"] == 8
    assert result["wrong_answers"] == 0
    assert result["lost_acknowledged_kv"] == 0
    assert result["errors"] == 0
    assert result["checks"]["probe_writes_acknowledged"] > 0


def test_every_fault_is_registered_in_order():
    """`bidaw chaos --faults` lists ORDER; the runner builds each from FAULTS."""
    from bench.chaos.faults import ORDER, BaseFault
    from bench.chaos.runner import FAULTS, load

    assert list(FAULTS) == ORDER
    assert all(isinstance(load(name), BaseFault) for name in ORDER)
    with pytest.raises(ValueError, match="unknown fault"):
        load("store-kil")
