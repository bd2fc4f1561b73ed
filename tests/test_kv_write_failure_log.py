"""A store that refuses every KV write (an SSD tier smaller than one conversation's KV, no DRAM
tier): each turn's answer stands and the worker says so once, not once a turn. The real model
through the worker's TurnRunner, a real store on real files."""
from __future__ import annotations

import logging

import pytest

from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2


@pytest.fixture
def runner(smollm, tmp_path):
    model, tok = smollm
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=0, ssd_bytes=64 << 10))  # < one turn's KV
    engine = Engine(model)
    client = KVClient(f"127.0.0.1:{server.port}")
    yield TurnRunner(engine, make_connector(client, model, "smol", common_pb2.KV_FORMAT_KV),
                     tok), client
    engine.stop()
    server.stop(0)
    core.close()


def test_a_store_refusing_every_write_is_one_line_not_one_a_turn(runner, caplog):
    runner, client = runner
    caplog.set_level(logging.WARNING, logger="bidaw.compute_worker")
    for i in range(5):
        turn = common_pb2.TurnRequest(session_id=f"s{i}", max_tokens=4, temperature=0,
                                      messages=[common_pb2.ChatMessage(
                                          role="user", content=f"Count to {i + 3}.")])
        summary = [s for _, _, s in runner.run(turn) if s is not None][-1]
        assert summary.completion_tokens == 4  # the answer stands
        assert client.lookup(f"s{i}").tier == common_pb2.TIER_NONE  # nothing was stored
    said = [r.getMessage() for r in caplog.records if "KV write of" in r.getMessage()]
    assert len(said) == 1 and "larger than the SSD tier" in said[0], said
