"""The engine under continuous batching: tensor-6 restore vs K/V restore vs recompute give
identical greedy answers, alone and with other sessions in flight (real model, real store)."""
from __future__ import annotations

import threading

import pytest
import torch
import transformers

from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.loaders.hf_loader import config_from_hf
from compute_worker.models import build_model
from compute_worker.models.weights import HF_TABLES, load_weights
from compute_worker.store_connector import make_connector
from compute_worker.tensor_choice import choose_tensor
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6


@pytest.fixture
def store(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=1 << 30))
    yield KVClient(f"127.0.0.1:{server.port}")
    server.stop(0)
    core.close()


@pytest.fixture(scope="module")
def opt_model():
    """A random-weight OPT (MHA, learned positions), built from a config with no download."""
    torch.manual_seed(0)
    hf = transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=512, hidden_size=128, ffn_dim=256, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=512, word_embed_proj_dim=128)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.1 * torch.randn_like(p))
    cfg = config_from_hf(hf.config.to_dict())
    model = build_model(cfg, device="cpu", dtype=torch.float32)
    load_weights(model, hf.state_dict().items(), HF_TABLES[cfg.arch])
    return model


def make_runner(model, tok, store, name, fmt, **engine_options) -> TurnRunner:
    """Turns through an engine of their own, with KV from `store` (None: recomputed)."""
    return TurnRunner(Engine(model, **engine_options), make_connector(store, model, name, fmt),
                      tok)


def turn(session, ids=None, messages=None, max_tokens=12):
    return common_pb2.TurnRequest(
        session_id=session, prompt_token_ids=ids or [], max_tokens=max_tokens, ignore_eos=True,
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in messages or []])


def answer(engine, request):
    ids, summary = [], None
    for new, _, s in engine.run(request):
        ids += new
        summary = s or summary
    return ids, summary


def answers_concurrently(engine, requests):
    results = [None] * len(requests)

    def go(i):
        results[i] = answer(engine, requests[i])
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_opt_stores_tensor6_and_restores_exactly_under_batching(opt_model, store):
    assert choose_tensor(opt_model.config) == "tensor6"  # MHA: h is half the bytes of K/V
    gen = torch.Generator().manual_seed(1)
    histories = [torch.randint(3, 512, (40 + 17 * i,), generator=gen).tolist() for i in range(4)]
    follow = [torch.randint(3, 512, (9,), generator=gen).tolist() for _ in range(4)]
    t6 = make_runner(opt_model, None, store, "opt", T6)
    kv = make_runner(opt_model, None, store, "opt-kv", KV)
    recompute = make_runner(opt_model, None, None, "opt", T6)
    expected = {}
    for i, h in enumerate(histories):  # turn 1 of every session, alone
        first, _ = answer(recompute, turn(f"s{i}", h))
        expected[i] = first
        assert answer(t6, turn(f"t6-{i}", h))[0] == first
        assert answer(kv, turn(f"kv-{i}", h))[0] == first
    # Turn 2 of all sessions at once, in one engine each: tensor-6 restore, K/V restore.
    second = [histories[i] + expected[i] + follow[i] for i in range(4)]
    ref = [answer(recompute, turn(f"r{i}", second[i]))[0] for i in range(4)]
    for engine, prefix, fmt in ((t6, "t6-", T6), (kv, "kv-", KV)):
        got = answers_concurrently(engine, [turn(f"{prefix}{i}", second[i]) for i in range(4)])
        assert [ids for ids, _ in got] == ref
        assert engine.engine.peak_batch >= 2  # the sessions really shared steps
        for i, (_, summary) in enumerate(got):
            assert summary.kv_format == fmt
            assert summary.cached_tokens == len(histories[i]) + len(expected[i]) - 1


def test_smollm_batched_answers_equal_solo_answers(smollm, store):
    model, tok = smollm
    questions = ["Name a fruit.", "What is 2+2?", "Say hi.", "Name a planet."]
    solo = make_runner(model, tok, None, "smol", KV)
    alone = [answer(solo, turn(f"a{i}", messages=[("user", q)]))[0]
             for i, q in enumerate(questions)]
    batched = make_runner(model, tok, store, "smol", T6)
    together = answers_concurrently(batched, [turn(f"b{i}", messages=[("user", q)])
                                              for i, q in enumerate(questions)])
    assert [ids for ids, _ in together] == alone
    assert batched.engine.peak_batch >= 2
    # Second turns restored from tensor 6 (SmolLM2 forced to it) while others decode.
    follow = [[("user", q), ("assistant", tok.decode(alone[i], skip_special_tokens=True)),
               ("user", "Why?")] for i, q in enumerate(questions)]
    ref = [answer(solo, turn(f"a{i}", messages=follow[i]))[0] for i in range(4)]
    got = answers_concurrently(batched, [turn(f"b{i}", messages=follow[i]) for i in range(4)])
    assert [ids for ids, _ in got] == ref
    assert all(s.cached_tokens > 0 and s.kv_format == T6 for _, s in got)


def test_a_step_floor_paces_every_step_and_changes_no_token(opt_model):
    """--min-step-ms: each of the 12 decode steps (plus the prefill) lasts at least the floor;
    the answer is the one without it."""
    import time

    free = make_runner(opt_model, None, None, "opt", KV)
    paced = make_runner(opt_model, None, None, "opt", KV, min_step_s=0.05)
    ids = list(range(5, 40))
    expected = answer(free, turn("a", ids=ids))[0]
    start = time.monotonic()
    got = answer(paced, turn("b", ids=ids))[0]
    assert got == expected and len(got) == 12
    assert time.monotonic() - start >= 12 * 0.05
    free.engine.stop(), paced.engine.stop()


@pytest.mark.parametrize("in_step", [True, False])
def test_restore_in_step_stalls_the_running_batch_while_a_kv_comes_off_ssd(opt_model, tmp_path,
                                                                          in_step):
    """--restore-in-step (the synchronous-connector baseline): while one turn reads its KV from a
    slow SSD, the running turn gets no token; without it the batch keeps decoding. Either way
    both answers are the ones computed without the store."""
    import time

    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=64 << 20, ssd_read_gbps_cap=0.001,
                                     ssd_io_bytes=64 << 10))
    client = KVClient(f"127.0.0.1:{server.port}")
    plain = make_runner(opt_model, None, None, "opt", KV)
    engine = make_runner(opt_model, None, client, "opt", KV, min_step_s=0.01,
                         restore_in_step=in_step)
    try:
        history = list(range(5, 205))
        first = answer(engine, turn("b", ids=history, max_tokens=8))[0]
        core.writer.wait("b")
        core.demote("b")  # ~640 KB on SSD, read at 1 MB/s
        assert client.lookup("b").tier == common_pb2.TIER_SSD
        follow_up = history + first + [7, 8, 9]
        long_ids = list(range(3, 13))

        stamps: list[float] = []
        got_a: list[int] = []

        def run_a():
            for new, _, _ in engine.run(turn("a", ids=long_ids, max_tokens=300)):
                got_a.extend(new)
                stamps.append(time.monotonic())

        runner = threading.Thread(target=run_a)
        runner.start()
        while len(stamps) < 20:
            time.sleep(0.005)
        got_b, summary = answer(engine, turn("b", ids=follow_up, max_tokens=8))
        runner.join()
        assert summary.kv_tier == common_pb2.TIER_SSD and summary.cached_tokens >= len(history)
        assert summary.kv_load_s > 0.4
        gap = max(b - a for a, b in zip(stamps, stamps[1:]))
        if in_step:
            assert gap >= 0.8 * summary.kv_load_s
        else:
            assert gap < 0.5 * summary.kv_load_s
        assert got_a == answer(plain, turn("a", ids=long_ids, max_tokens=300))[0]
        assert got_b == answer(plain, turn("b", ids=follow_up, max_tokens=8))[0]
    finally:
        plain.engine.stop(), engine.engine.stop()
        server.stop(0)
        core.close()
