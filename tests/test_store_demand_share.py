"""The live store tells bidaw-prefetch how busy its disk is with demand reads, as the
simulators do (kv_store/eviction/disk_share.py): a demand read from SSD moves the ranking's size
exponent from bidaw-size's towards the loaded one; a read from DRAM does not. bidaw-size
hears it too (in its own clock); a policy without the hook (LRU) hears nothing. Real gRPC,
real files."""
from __future__ import annotations

import os

from services.runtime.gen import common_pb2
from tests.store_helpers import store  # noqa: F401 (a fixture)

KV = common_pb2.KV_FORMAT_KV
MIB = 1 << 20
# A disk capped at 4 MB/s: a 1 MiB read is busy ~0.26 s of the policy's clock (scale 0.01:
# 26 s), a large share of the 300 s the share is measured over.
STORE_DEFAULTS = dict(eviction="bidaw-prefetch", policy_time_scale=0.01, ssd_read_gbps_cap=0.004)


def test_a_demand_read_from_ssd_raises_the_size_exponent(store):
    client, core = store(dram_bytes=8 * MIB)
    policy = core.policy.inner
    idle = policy.size_exponent
    assert idle == policy.idle_size_exponent and policy.loaded_size_exponent > idle
    client.write("s", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    client.read("s")  # from DRAM: the disk is not asked
    assert policy.size_exponent == idle
    core.demote("s")
    assert client.lookup("s").tier == common_pb2.TIER_SSD
    client.read("s")  # a demand read from SSD
    assert idle < policy.size_exponent <= policy.loaded_size_exponent


def test_bidaw_size_hears_the_demand_read_too(store):
    client, core = store(dram_bytes=8 * MIB, eviction="bidaw-size")
    policy = core.policy.inner
    client.write("s", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    core.demote("s")
    client.read("s")
    assert policy.idle_size_exponent < policy.size_exponent <= policy.loaded_size_exponent


def test_another_policy_hears_nothing_and_reads_as_before(store):
    client, core = store(dram_bytes=8 * MIB, eviction="lru")
    assert core.reads.parts.demand_read is None
    data = os.urandom(MIB)
    client.write("s", 0, list(range(16)), KV, MIB // 16, "m", data)
    core.demote("s")
    assert bytes(client.read("s").data) == data
