"""bidaw-size's size exponent follows the disk's demand reads (DemandShare): where they fill
the disk, the bytes read are the disk's either way and eviction only decides how many turns DRAM
serves, so small entries rank higher. A caller that reports nothing keeps β."""
from __future__ import annotations

import math

import pytest

from kv_store.eviction.bidaw_size import BidawSizePolicy
from kv_store.eviction.registry import make_policy


def _filled(**kw) -> BidawSizePolicy:
    # a: 1000 B, short answer (back in ~29 s by the prior); b: 10 B, long answer (~148 s):
    # b waits ~5x longer, a is 100x larger: 100^0.2 = 2.5 < 5 (b goes), 100^0.7 = 25 > 5 (a)
    pol = BidawSizePolicy(protect_queue=0, **kw)
    for key, size, answer in (("a", 1000, 12), ("b", 10, 192)):
        pol.admit(key, size, 0.0)
        pol.observe_answer(key, answer, 0.0)
    return pol


def test_a_disk_full_of_demand_reads_evicts_the_large_entry_first():
    idle = _filled()
    assert idle.victim(1.0) == "b" and idle.size_exponent == 0.2
    busy = _filled()
    busy.observe_demand_read(-899.0, 1.0)       # busy for 3 time constants: share 0.95
    assert busy.size_exponent == pytest.approx(0.2 + 0.5 * (1 - math.exp(-3)))
    assert busy.victim(1.0) == "a"
    busy.observe_demand_read(1.0, 1.0)          # nothing read: the share only decays
    assert busy.size_exponent == pytest.approx(0.2 + 0.5 * (1 - math.exp(-3)))


def test_a_light_load_moves_beta_a_little_and_the_old_rule_is_reachable():
    light = _filled()
    light.observe_demand_read(0.0, 30.0)        # 30 s of the last ~300: share ~0.095
    assert 0.2 < light.size_exponent < 0.3
    assert light.victim(31.0) == "b"
    fixed = _filled(loaded_size_exponent=None)
    fixed.observe_demand_read(-899.0, 1.0)
    assert fixed.size_exponent == 0.2 and fixed.victim(1.0) == "b"


def test_a_scaled_clock_reports_the_disk_in_the_policy_clock():
    pol = make_policy("bidaw-size", 1000, 0, time_scale=0.01)
    pol.observe_demand_read(0.0, 3.0)           # 3 s of wall time: 300 s of the policy's
    assert pol.inner.size_exponent == pytest.approx(0.2 + 0.5 * (1 - math.exp(-1)))
    assert getattr(make_policy("lru", 1000, 0, time_scale=0.01), "observe_demand_read",
                   None) is None                # a policy without the hook hears nothing
