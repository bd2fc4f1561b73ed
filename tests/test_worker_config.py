"""The worker's prefill chunk (`--prefill-chunk-tokens`): a bad value is refused naming the
flag before anything starts, and the engine cuts a prompt into chunks of that many tokens."""
from __future__ import annotations

import pytest

from compute_worker.config import WorkerConfig
from compute_worker.engine import Engine
from compute_worker.engine_config import EngineConfig
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from services.cli.main import main as bidaw
from services.runtime.gen import common_pb2


@pytest.mark.parametrize("bad", [0, -5, 1 << 17])
def test_a_bad_prefill_chunk_is_refused_naming_the_flag(bad):
    with pytest.raises(ValueError, match=f"--prefill-chunk-tokens .* not {bad}"):
        WorkerConfig(prefill_chunk_tokens=bad)
    with pytest.raises(SystemExit, match="bidaw serve worker: --prefill-chunk-tokens must be"):
        bidaw(["serve", "worker", "--prefill-chunk-tokens", str(bad)])


def test_the_chunk_reaches_the_engine_which_prefills_that_many_tokens_a_step(smollm,
                                                                             monkeypatch):
    config = EngineConfig.from_worker(WorkerConfig(prefill_chunk_tokens=32, store=""))
    assert config.prefill_chunk_tokens == 32
    model, tokenizer = smollm
    fed: list[int] = []  # new tokens of each forward (an observer: the real forward runs)
    forward = model.forward

    def observed(batch, **kw):
        fed.append(sum(len(tokens) for tokens, _ in batch))
        return forward(batch, **kw)

    monkeypatch.setattr(model, "forward", observed)
    engine = Engine(model, max_prefill_tokens=config.prefill_chunk_tokens)
    runner = TurnRunner(engine, make_connector(None, model, "chunk", common_pb2.KV_FORMAT_KV),
                        tokenizer)
    try:
        for _ in runner.run(common_pb2.TurnRequest(session_id="chunk", max_tokens=2,
                                                   prompt_token_ids=list(range(100, 200)),
                                                   ignore_eos=True)):
            pass
    finally:
        engine.stop()
    assert fed == [32, 32, 32, 4, 1]  # 100 prompt tokens in chunks of 32, then one decode
