"""A session's KV written in one dtype is never served to a worker of another, with the real
model and a real store: a bf16 worker converts fp32 KV (rounding it, then rewriting the session
in bf16), an fp32 worker recomputes bf16 KV (and its answer equals its own recompute)."""
from __future__ import annotations

import pytest
import torch

from compute_worker import kv_codec
from bench.exactness import answer_turn
from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.models.kv_blocks import whole_blocks
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6
F32, BF16 = common_pb2.KV_DTYPE_FLOAT32, common_pb2.KV_DTYPE_BFLOAT16
Q1, Q2, Q3 = "Name two planets.", "Which one is bigger?", "Thanks."


@pytest.fixture
def kv_store(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=1 << 30))
    client = KVClient(f"127.0.0.1:{server.port}")
    yield client
    client.close()
    server.stop(0)
    core.close()


def runner(model_tok, store, fmt=KV) -> TurnRunner:
    model, tok = model_tok
    return TurnRunner(Engine(model), make_connector(store, model, "smol", fmt), tok)


def ask(runner, session, history, max_tokens=6):
    return answer_turn(runner, session, history, max_tokens)


def prompt_of(tok, history) -> list[int]:
    return tok.apply_chat_template([{"role": r, "content": c} for r, c in history])


@pytest.mark.parametrize("fmt", [KV, T6])
def test_a_bf16_worker_converts_fp32_kv_and_rewrites_the_session(smollm, smollm_bf16,
                                                                   kv_store, fmt):
    fp32, bf16 = runner(smollm, kv_store, fmt), runner(smollm_bf16, kv_store, fmt)
    _, a1, _ = ask(fp32, "c", [("user", Q1)])
    stored = kv_store.read("c")
    assert stored.dtype == F32
    history = [("user", Q1), ("assistant", a1), ("user", Q2)]
    prompt = prompt_of(smollm[1], history)
    restored = bf16.connector.restore("c", prompt)
    n = restored.tokens
    assert restored.converted and n > 10 and bf16.connector.dtype_actions == {"convert": 1}
    rounded = torch.frombuffer(bytearray(stored.data[:n * stored.bytes_per_token]),
                               dtype=torch.float32).to(torch.bfloat16)
    if fmt == KV:  # the restored K/V are the fp32 ones rounded to nearest, bit for bit
        got = restored.cache.to_token_major(0, n).reshape(-1)
        assert torch.equal(got.view(torch.int16), rounded.view(torch.int16))
    else:  # tensor 6 likewise, before it becomes K/V
        assert restored.prefix6 == kv_codec.to_bytes(rounded)
    _, a2, summary = ask(bf16, "c", history)
    kept = whole_blocks(n, smollm_bf16[0].kv_block)  # a bf16 turn reuses whole blocks only
    assert summary.cached_tokens == kept > 0 and bf16.connector.dtype_actions == {"convert": 2}
    info = kv_store.lookup("c")  # the turn wrote the whole session again, in bf16
    assert info.dtype == BF16 and info.num_tokens > n
    assert info.bytes_per_token == stored.bytes_per_token // 2
    _, _, summary = ask(bf16, "c", history + [("assistant", a2), ("user", Q3)])
    # its own bf16 KV now, no third conversion (whole blocks: turn 2 may not have added one)
    assert summary.cached_tokens >= kept and summary.cached_tokens % smollm_bf16[0].kv_block == 0
    assert bf16.connector.dtype_actions == {"convert": 2}


def test_an_fp32_worker_recomputes_bf16_kv_and_stays_exact(smollm, smollm_bf16, kv_store):
    fp32, bf16 = runner(smollm, kv_store), runner(smollm_bf16, kv_store)
    fresh = runner(smollm, None)
    _, a1, _ = ask(bf16, "c", [("user", Q1)])
    assert kv_store.lookup("c").dtype == BF16
    history = [("user", Q1), ("assistant", a1), ("user", Q2)]
    ids, a2, summary = ask(fp32, "c", history)
    assert summary.cached_tokens == 0 and fp32.connector.dtype_actions == {"recompute": 1}
    assert ids == ask(fresh, "c", history)[0]  # exactly the fp32 recompute
    info = kv_store.lookup("c")
    assert info.dtype == F32 and info.num_tokens >= len(prompt_of(smollm[1], history))
    _, _, summary = ask(fp32, "c", history + [("assistant", a2), ("user", Q3)])
    assert summary.cached_tokens > 0 and fp32.connector.dtype_actions == {"recompute": 1}


def test_the_engine_host_loads_the_model_in_the_dtype_of_its_config():
    from compute_worker.actor import EngineHost
    from compute_worker.config import WorkerConfig
    from compute_worker.engine_config import EngineConfig

    config = EngineConfig.from_worker(WorkerConfig(store="", dtype="bfloat16"))
    threads = torch.get_num_threads()  # the host sets the process's (it owns one in a worker)
    try:
        host = EngineHost(config)
        info = host.info()
        host.runner.engine.stop()
    finally:
        torch.set_num_threads(threads)
    assert (info["dtype"], info["dtype_reason"], info["kv_dtype"]) == (
        "bfloat16", "--dtype bfloat16", BF16)
    assert info["kv_bytes_per_token"] == 30 * 2 * 3 * 64 * 2  # layers x K,V x heads x dim x 2 B
