"""The scheduler's load-or-recompute choice over the real services (`--restore-choice on`): with
a disk so slow that loading a history takes several times its recompute, the scheduler does not
wait for the load; the worker recomputes the history (or its beginning, reading only the rest)
and the answer is the one a turn without any stored KV gets, token for token. Then, the store
restarted with a disk about as fast as the worker's prefill, the worker recomputes the history's
beginning while the store reads the rest (the reversed split): both are used, and the answer is
again exact.

Sessions are sized in tokens of SmolLM2 KV (46,080 bytes each); the SSD is throttled to 2 MB/s
and the store told so, so an 800-token history (37 MB) is expected to take 18 s to load, several
times its recompute even on a loaded 2-core machine; at 15 MB/s a token loads in ~3 ms, about
what it takes to compute here, so the best split is near the middle."""
from __future__ import annotations

import torch

from compute_worker.kv_client import KVClient
from services.client.chat_client import ChatClient
from services.launch.launcher import LocalDeployment
from services.runtime.gen import common_pb2


def tokens(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(100, 40000, (n,), generator=gen).tolist()


def test_the_scheduler_does_not_wait_for_a_slow_load_and_the_answers_are_exact(tmp_path):
    dep = LocalDeployment(
        data_dir=str(tmp_path), dram_bytes="40MiB", eviction="lru", policy="bidaw",
        supervise=False,
        extra_args={"store": ["--ssd-read-gbps-cap", "0.002", "--ssd-read-gbps", "0.002"],
                    "scheduler": ["--max-loads", "1", "--restore-choice", "on"]})
    with dep:
        client, store = ChatClient(dep.scheduler_target), KVClient(dep.store_target)
        for i in range(8):  # the scheduler learns the prefill rate from these turns' summaries
            client.turn(f"warm{i}", prompt_token_ids=tokens(i, 20 + 40 * i), max_tokens=1)
        got, want = _turn_on_ssd(client, store, "long", 99)
        assert got.token_ids == want.token_ids and len(got.token_ids) == 4
        summary = got.summary
        assert summary.queue_s < 5.0  # nobody waited for the 18 s load
        if summary.recomputed_tokens == 0:  # the whole history recomputed, the store not read
            assert summary.cached_tokens == 0 and summary.kv_tier == common_pb2.TIER_NONE
        else:  # or its beginning (how much: by the prefill rate it learnt on this machine)
            assert summary.cached_tokens + summary.recomputed_tokens <= 800

        store_svc = dep.services["store"]  # the sessions stay on SSD, the rest runs on
        store_svc.terminate()
        store_svc.reap(20)
        store_svc.args += ["--ssd-read-gbps-cap", "0.015", "--ssd-read-gbps", "0.015"]
        dep.restart("store")
        got, want = _turn_on_ssd(client, store, "long2", 97)
        assert got.token_ids == want.token_ids and len(got.token_ids) == 4
        summary = got.summary
        assert summary.kv_tier == common_pb2.TIER_SSD
        assert 0 < summary.recomputed_tokens < summary.prompt_tokens - 3  # the beginning ...
        assert summary.cached_tokens > 0  # ... and the rest read from the SSD
        assert summary.recomputed_tokens + summary.cached_tokens <= summary.prompt_tokens - 3
        assert summary.queue_s < 5.0  # nobody waited for the whole 2.5 s load


def _turn_on_ssd(client: ChatClient, store: KVClient, session: str, seed: int):
    """Put an 800-token history on SSD, then send its next turn and the same prompt as a fresh
    session: (that turn's answer, the fresh one)."""
    client.turn(session, prompt_token_ids=tokens(seed, 800), max_tokens=1)
    client.turn(f"{session}-filler", prompt_token_ids=tokens(seed - 1, 300),
                max_tokens=1)  # LRU: the history out of DRAM
    assert store.lookup(session).tier == common_pb2.TIER_SSD
    prompt = list(store.lookup(session).token_ids) + [101, 102, 103]
    got = client.turn(session, prompt_token_ids=prompt, max_tokens=4, ignore_eos=True)
    want = client.turn(f"{session}-fresh", prompt_token_ids=prompt, max_tokens=4,
                       ignore_eos=True)
    return got, want
