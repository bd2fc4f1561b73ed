"""The KV's dtype is part of its identity: `--dtype` and its auto choice, and a real store that
keeps the dtype on every path (DRAM, shared memory, SSD, a restart, the Redis index) and refuses
to append KV of another dtype to a session."""
from __future__ import annotations

import os

import grpc
import pytest
import redis
import torch

from compute_worker.config import DTYPE_CHOICES, WorkerConfig
from compute_worker.dtype_reuse import CONVERT, RECOMPUTE, USE, reuse_action
from compute_worker.kv_client import KVClient
from compute_worker.loaders.dtype_choice import DTYPES, choose_dtype, cpu_flags
from services.cli.main import main as bidaw
from services.runtime.gen import common_pb2
from tests.redis_server import redis_url  # noqa: F401 (a fixture)
from tests.store_helpers import BPT, Stores, store  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
F32, BF16 = common_pb2.KV_DTYPE_FLOAT32, common_pb2.KV_DTYPE_BFLOAT16
F16, UNSAID = common_pb2.KV_DTYPE_FLOAT16, common_pb2.KV_DTYPE_UNSPECIFIED
SAPPHIRE_RAPIDS = frozenset({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"})


def test_auto_picks_bf16_where_the_hardware_runs_it():
    assert choose_dtype("auto", "cuda", frozenset()).dtype == torch.bfloat16
    # bf16 on the matrix units where their linears are row-invariant: block-aligned KV keeps
    # reuse exact; float32 where they are not (row_probe.py; docs/engine.md)
    amx = choose_dtype("auto", "cpu", SAPPHIRE_RAPIDS, lambda: True)
    assert amx.dtype == torch.bfloat16 and "AMX-BF16" in amx.reason and "exact" in amx.reason
    mixed = choose_dtype("auto", "cpu", SAPPHIRE_RAPIDS, lambda: False)
    assert mixed.dtype == torch.float32 and "AMX-BF16" in mixed.reason
    asked = []
    avx = choose_dtype("auto", "cpu", frozenset({"avx512f", "avx512_bf16"}),
                       lambda: asked.append(1) or True)
    assert avx.dtype == torch.float32 and "AVX512-BF16" in avx.reason and not asked
    plain = choose_dtype("auto", "cpu", frozenset({"avx2", "avx512f", "fma"}))
    assert plain.dtype == torch.float32 and "no AMX-BF16" in plain.reason
    forced = choose_dtype("float32", "cpu", SAPPHIRE_RAPIDS)
    assert (forced.dtype, forced.reason, forced.name) == (torch.float32, "--dtype float32",
                                                          "float32")
    assert choose_dtype("bfloat16", "cpu", frozenset()).dtype == torch.bfloat16
    assert set(DTYPES) | {"auto"} == set(DTYPE_CHOICES)


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx512f amx_bf16\n")
    assert cpu_flags(info) == {"fpu", "avx512f", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_a_bad_dtype_is_refused_naming_the_flag(capsys):
    with pytest.raises(ValueError, match="--dtype must be one of auto, float32, bfloat16"):
        choose_dtype("fp16", "cpu", frozenset())
    with pytest.raises(ValueError, match="--dtype .* not 'half'"):
        WorkerConfig(dtype="half")
    with pytest.raises(SystemExit, match="bidaw serve worker: --dtype must be one of"):
        bidaw(["serve", "worker", "--dtype", "half"])
    with pytest.raises(SystemExit, match="bench exactness: --dtype must be one of"):
        bidaw(["bench", "exactness", "--dtype", "auto"])


def test_kv_of_another_dtype_is_converted_from_float32_only():
    assert reuse_action(BF16, BF16) == USE and reuse_action(F32, F32) == USE
    assert reuse_action(F32, BF16) == CONVERT and reuse_action(F32, F16) == CONVERT
    assert reuse_action(BF16, F32) == RECOMPUTE  # fp32 stays exact to its own recompute
    assert reuse_action(F16, BF16) == RECOMPUTE and reuse_action(BF16, F16) == RECOMPUTE
    assert reuse_action(UNSAID, F32) == RECOMPUTE and reuse_action(UNSAID, BF16) == RECOMPUTE


def test_the_store_keeps_the_dtype_on_every_path_and_across_a_restart(store):
    client, core = store(dram_bytes=1 << 20)
    one, two = os.urandom(2 * BPT), os.urandom(BPT)
    client.write("s", 0, [1, 2], KV, BPT, "m", one, dtype=BF16)
    client.write("s", 2, [3], KV, BPT, "m", two, dtype=BF16)
    client.write("old", 0, [7], KV, BPT, "m", one[:BPT])  # a writer from before dtypes
    stream = KVClient(client.target, shared_memory=False)
    assert client.lookup("s").dtype == BF16 and client.lookup("old").dtype == UNSAID
    for reader in (client, stream):  # shared memory, then the gRPC stream
        got = reader.read("s")
        assert (got.dtype, got.tier, got.data) == (BF16, common_pb2.TIER_DRAM, one + two)
    assert core.stats()["shm_reads"] >= 1
    store.stop(core)
    client, core = store(dram_bytes=0)  # the index rebuilt from the SSD records
    got = client.read("s")
    assert (got.dtype, got.tier, got.data) == (BF16, common_pb2.TIER_SSD, one + two)
    assert client.read("old").dtype == UNSAID  # its record's dtype byte is 0


def test_kv_of_another_dtype_is_never_appended_to_a_session(store):
    client, _ = store()
    client.write("s", 0, [1, 2], KV, BPT, "m", os.urandom(2 * BPT), dtype=F32)
    with pytest.raises(grpc.RpcError) as err:
        client.write("s", 2, [3], KV, BPT, "m", os.urandom(BPT), dtype=BF16)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "dtype" in err.value.details()
    client.write("s", 0, [1, 2, 3], KV, BPT // 2, "m", os.urandom(3 * BPT // 2), dtype=BF16)
    info = client.lookup("s")  # from token 0: replaced
    assert (info.dtype, info.num_tokens, info.bytes_per_token) == (BF16, 3, BPT // 2)
    with pytest.raises(grpc.RpcError) as err:
        client.write("t", 0, [1], KV, BPT, "m", os.urandom(BPT), dtype=99)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "header.dtype" in err.value.details()


def test_the_redis_index_keeps_the_dtype(tmp_path, redis_url):
    stores = Stores(tmp_path / "ssd", dram_bytes=1 << 20, index=redis_url)
    try:
        client, core = stores()
        client.write("s", 0, [1, 2], KV, BPT, "m", os.urandom(2 * BPT), dtype=BF16)
        client.write("old", 0, [1], KV, BPT, "m", os.urandom(BPT), dtype=F32)
        stores.stop(core)
        r = redis.Redis.from_url(redis_url)
        assert int(r.hget("bidaw:kv:s:s", "dt")) == BF16
        r.hdel("bidaw:kv:s:old", "dt")  # an entry written before dtypes were kept
        client, core = stores()
        assert core.catalog.kind == "redis"
        assert client.lookup("s").dtype == BF16 and client.lookup("old").dtype == UNSAID
    finally:
        stores.close()
