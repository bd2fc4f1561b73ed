"""The scheduler's load-or-recompute choice over the real services (`--restore-choice on`): with
a disk so slow that loading a history takes several times its recompute, the scheduler does not
wait for the load; the worker recomputes the history without reading the store, and the answer
is the one a turn without any stored KV gets, token for token.

Sessions are sized in tokens of SmolLM2 KV (46,080 bytes each); the SSD is throttled to 2 MB/s
and the store told so, so an 800-token history (37 MB) is expected to take 18 s to load, several
times its recompute even on a loaded 2-core machine."""
from __future__ import annotations

import torch

from compute_worker.kv_client import KVClient
from services.client.chat_client import ChatClient
from services.launch.launcher import LocalDeployment
from services.runtime.gen import common_pb2


def tokens(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(100, 40000, (n,), generator=gen).tolist()


def test_a_slow_disk_makes_the_scheduler_recompute_and_the_answer_is_exact(tmp_path):
    dep = LocalDeployment(
        data_dir=str(tmp_path), dram_bytes="40MiB", eviction="lru", policy="bidaw",
        extra_args={"store": ["--ssd-read-gbps-cap", "0.002", "--ssd-read-gbps", "0.002"],
                    "scheduler": ["--max-loads", "1", "--restore-choice", "on"]})
    with dep:
        client, store = ChatClient(dep.scheduler_target), KVClient(dep.store_target)
        for i in range(8):  # the scheduler learns the prefill rate from these turns' summaries
            client.turn(f"warm{i}", prompt_token_ids=tokens(i, 20 + 40 * i), max_tokens=1)
        long = tokens(99, 800)
        client.turn("long", prompt_token_ids=long, max_tokens=1)
        client.turn("filler", prompt_token_ids=tokens(98, 300), max_tokens=1)  # LRU: long out
        assert store.lookup("long").tier == common_pb2.TIER_SSD
        prompt = list(store.lookup("long").token_ids) + [101, 102, 103]
        got = client.turn("long", prompt_token_ids=prompt, max_tokens=4, ignore_eos=True)
        want = client.turn("fresh", prompt_token_ids=prompt, max_tokens=4, ignore_eos=True)
    assert got.token_ids == want.token_ids and len(got.token_ids) == 4
    assert got.summary.cached_tokens == 0  # the worker did not read the stored KV
    assert got.summary.kv_tier == common_pb2.TIER_NONE
    assert got.summary.queue_s < 5.0  # nobody waited for the 18 s load
