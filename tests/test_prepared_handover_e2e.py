"""A turn that arrives while its prepared load is still running takes over the end it has landed,
over the real services (`--restore-choice on`): the store reads a prepared history end first
(kv_store/end_first.py), the scheduler sees the landed start on the Awareness stream and
dispatches the turn at once, its worker recomputes the beginning and reads the landed end from
DRAM, the load stops, and the answer is the one a turn without stored KV gets, token for token.

A four-turn history of ~800 SmolLM2 tokens (46,080 bytes each: four records, 37 MB) on a disk
capped at 4 MB/s: the first quarter lands after ~2.3 s and the rest would take ~7 s more, where
recomputing the beginning takes about a second here."""
from __future__ import annotations

import time

from compute_worker.kv_client import KVClient
from services.client.chat_client import ChatClient
from services.launch.launcher import LocalDeployment
from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import AwarenessStream
from tests.test_restore_choice_e2e import tokens


def test_a_turn_arriving_mid_load_reads_the_landed_end_and_answers_exactly(tmp_path):
    dep = LocalDeployment(
        data_dir=str(tmp_path), dram_bytes="40MiB", eviction="lru", policy="bidaw",
        supervise=False,
        extra_args={"store": ["--ssd-read-gbps-cap", "0.004", "--ssd-read-gbps", "0.004"],
                    "scheduler": ["--max-loads", "1", "--restore-choice", "on"]})
    with dep:
        client, store = ChatClient(dep.scheduler_target), KVClient(dep.store_target)
        for i in range(8):  # the scheduler learns the prefill rate from these turns' summaries
            client.turn(f"warm{i}", prompt_token_ids=tokens(i, 20 + 40 * i), max_tokens=1)
        stored: list[int] = []
        for turn in range(4):  # four turns: four records on SSD
            client.turn("h", prompt_token_ids=stored + tokens(50 + turn, 200), max_tokens=1)
            stored = list(store.lookup("h").token_ids)
        client.turn("filler", prompt_token_ids=tokens(49, 300), max_tokens=1)  # LRU: h out
        assert store.lookup("h").tier == common_pb2.TIER_SSD

        stream = AwarenessStream(store.stub)
        stream.next("snapshot")
        assert client.prepare("h") == "loading"
        start = stream.next("location", timeout=30, where=lambda e: e.session_id == "h"
                            and e.landed_from_token > 0).landed_from_token
        assert 0 < start < len(stored)
        prompt = stored + [101, 102, 103]
        began = time.monotonic()
        got = client.turn("h", prompt_token_ids=prompt, max_tokens=4, ignore_eos=True)
        summary = got.summary
        assert summary.queue_s < 2.0 and time.monotonic() - began < 5.0  # not the ~7 s rest
        assert summary.kv_tier == common_pb2.TIER_DRAM  # the landed end, in DRAM already
        # the beginning recomputed (all that had not landed, or less while the load brought
        # the rest of the end: the scheduler's choice) and the end read, the whole history
        assert 0 < summary.recomputed_tokens <= start + 32 and summary.cached_tokens > 0
        assert summary.recomputed_tokens + summary.cached_tokens >= len(stored) - 32
        assert summary.recomputed_tokens + summary.cached_tokens <= len(prompt) - 3
        done = stream.next("load_finished", timeout=30, where=lambda e: e.session_id == "h")
        assert not done.ok  # the load stopped at the end it had landed
        stats = store.stub.Stats(kv_store_pb2.StoreStatsRequest())
        assert stats.prepared_handed_over == 1
        want = client.turn("fresh", prompt_token_ids=prompt, max_tokens=4, ignore_eos=True)
        assert got.token_ids == want.token_ids and len(got.token_ids) == 4
        stream.close()
