"""The worker's prefill chunk (`--prefill-chunk-tokens`) and small-step threads
(`--small-step-threads`): a bad value is refused naming the flag before anything starts, and
the engine obeys them."""
from __future__ import annotations

import pytest

from compute_worker.config import WorkerConfig
from compute_worker.engine import Engine
from compute_worker.engine_config import EngineConfig
from compute_worker.step_threads import SMALL_STEP_TOKENS, step_threads
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


def _observed_turn(model, tokenizer, monkeypatch, engine: Engine, session: str, prompt: int,
                   max_tokens: int, observe, first_id: int = 100) -> None:
    """Run one turn of `prompt` tokens through `engine`, calling `observe(batch)` before each
    real forward (an observer: the real forward runs)."""
    forward = model.forward

    def observed(batch, **kw):
        observe(batch)
        return forward(batch, **kw)

    monkeypatch.setattr(model, "forward", observed)
    runner = TurnRunner(engine, make_connector(None, model, session, common_pb2.KV_FORMAT_KV),
                        tokenizer)
    ids = list(range(first_id, first_id + prompt))
    try:
        for _ in runner.run(common_pb2.TurnRequest(session_id=session, max_tokens=max_tokens,
                                                   prompt_token_ids=ids, ignore_eos=True)):
            pass
    finally:
        engine.stop()


def _new_tokens(batch) -> int:
    return sum(len(tokens) for tokens, _ in batch)


def test_the_chunk_reaches_the_engine_which_prefills_that_many_tokens_a_step(smollm,
                                                                             monkeypatch):
    config = EngineConfig.from_worker(WorkerConfig(prefill_chunk_tokens=32, store=""))
    assert config.prefill_chunk_tokens == 32
    model, tokenizer = smollm
    fed: list[int] = []  # new tokens of each forward
    _observed_turn(model, tokenizer, monkeypatch,
                   Engine(model, max_prefill_tokens=config.prefill_chunk_tokens), "chunk", 100,
                   2, lambda batch: fed.append(_new_tokens(batch)))
    assert fed == [32, 32, 32, 4, 1]  # 100 prompt tokens in chunks of 32, then one decode


@pytest.mark.parametrize("bad", [-1, 1025])
def test_a_bad_small_step_thread_count_is_refused_naming_the_flag(bad):
    with pytest.raises(ValueError, match=f"--small-step-threads .* not {bad}"):
        WorkerConfig(small_step_threads=bad)


def test_the_thread_rule_splits_big_steps_only():
    assert step_threads(1, 8, 1) == 1
    assert step_threads(SMALL_STEP_TOKENS, 8, 2) == 2
    assert step_threads(SMALL_STEP_TOKENS + 1, 8, 1) == 8  # a prefill chunk: every thread
    assert step_threads(1, 8, 0) == 8  # 0: the rule is off


def test_the_engine_runs_small_steps_on_the_small_step_threads(smollm, monkeypatch):
    """A prompt of 40 tokens in chunks of 20, then decodes: the chunks run on the process's 2
    threads, the decode steps on 1 (read inside the real forward), and the process keeps its
    count for the next big step."""
    import torch

    config = EngineConfig.from_worker(WorkerConfig(store="", small_step_threads=1))
    assert config.small_step_threads == 1
    model, tokenizer = smollm
    seen: list[tuple[int, int]] = []  # (new tokens, threads) of each forward
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine = Engine(model, max_prefill_tokens=20,
                        small_step_threads=config.small_step_threads)
        _observed_turn(model, tokenizer, monkeypatch, engine, "threads", 40, 3,
                       lambda batch: seen.append((_new_tokens(batch), torch.get_num_threads())))
    finally:
        torch.set_num_threads(before)
    assert seen == [(20, 2), (20, 2), (1, 1), (1, 1)]


def test_a_q4_engine_runs_every_step_on_all_threads(monkeypatch):
    """The native forward splits only work worth a thread's start (compute_worker/native), so a
    q4 model's decodes run on every thread whatever `small_step_threads` says."""
    import torch

    from tests.test_native_forward import q4_model

    model = q4_model("llama_gqa")
    seen: list[tuple[int, int]] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine = Engine(model, max_prefill_tokens=20, small_step_threads=1)
        _observed_turn(model, None, monkeypatch, engine, "q4-threads", 40, 3,
                       lambda batch: seen.append((_new_tokens(batch), torch.get_num_threads())),
                       first_id=1)
    finally:
        torch.set_num_threads(before)
    assert seen == [(20, 2), (20, 2), (1, 2), (1, 2)]
