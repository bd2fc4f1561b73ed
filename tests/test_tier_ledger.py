"""The one capacity loop: bytes, the watermark, exclusions, a caller's own `fits`."""
from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.registry import make_policy
from kv_store.eviction.upper_tier_last import UpperTierLast


def test_make_room_evicts_least_recent_until_need_fits_under_the_watermark():
    ledger = TierLedger(make_policy("lru"), capacity=100, watermark=10)
    for i, key in enumerate("abc"):
        ledger.admit(key, 30, now=float(i))
    ledger.touch("a", now=5.0)
    evicted = []
    assert ledger.make_room(20, now=6.0, on_evict=evicted.append)
    assert evicted == ["b"] and ledger.used == 60 and "b" not in ledger
    assert ledger.evictions == 1


def test_excluded_entries_stay_and_a_full_tier_says_so():
    ledger = TierLedger(make_policy("fifo"), capacity=50)
    ledger.admit("x", 25, 0.0)
    ledger.admit("y", 25, 1.0)
    assert not ledger.make_room(10, 2.0, exclude={"x", "y"})
    assert ledger.used == 50 and len(ledger) == 2
    assert not ledger.make_room(60, 2.0)  # more than the tier: everything goes, still no room
    assert ledger.used == 0


def test_resize_changes_the_bytes_and_a_callers_fits_decides():
    ledger = TierLedger(make_policy("lru"), capacity=None)
    ledger.admit("s", 10, 0.0)
    ledger.resize("s", 40)
    assert ledger.used == 40 and ledger.fits(10**12)  # unbounded
    free = {"bytes": 0}

    def fits(need):
        return free["bytes"] >= need

    def drop(key):
        free["bytes"] += 40

    assert ledger.make_room(30, 1.0, fits=fits, on_evict=drop) and ledger.used == 0
    assert ledger.remove("s") == 0  # already gone


def test_make_policy_tells_the_policy_its_tier_and_scales_its_clock():
    policy = make_policy("bidaw", capacity=8 << 30, watermark=1 << 30, time_scale=0.5)
    assert policy.inner.regions.capacity == 8 << 30
    assert policy.inner.ghost.watermark == (1 << 30) // policy.inner.ghost.sample_rate


def test_an_inclusive_lower_tier_gives_up_what_the_upper_tier_lacks_first():
    upper = {"a", "c"}  # also held by the tier above (DRAM, for the SSD tier)
    ledger = TierLedger(UpperTierLast(make_policy("lru"), upper), capacity=None)
    for i, key in enumerate("abcde"):
        ledger.admit(key, 0, now=float(i))
    ledger.touch("b", now=9.0)  # b: the most recent of those only here
    freed = []
    assert not ledger.make_room(0, now=10.0, exclude={"d"}, fits=lambda _: len(freed) == 5,
                                on_evict=freed.append)
    assert freed == ["e", "b", "a", "c"] and list(ledger.sizes) == ["d"]  # d: in use
