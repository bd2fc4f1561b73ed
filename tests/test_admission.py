"""The gateway's fair admission core (pure, time passed in): FIFO order per tenant, round-robin
across tenants, bounds, deadlines, and a Retry-After computed from the measured drain rate."""
from __future__ import annotations

import pytest

from services.gateway.admission import (ADMITTED, CANCELLED, EXPIRED, WAITING, DrainRate,
                                        FairQueue, Refusal, Waiter, retry_after_header)


def admitted(changed):
    return [w for w in changed if w.state == ADMITTED]


def test_free_slots_admit_at_once_then_turns_wait_in_arrival_order():
    q = FairQueue(slots=2, max_waiting=10)
    first = [q.arrive("a", 0.0) for _ in range(2)]
    assert [w.state for w in first] == [ADMITTED, ADMITTED] and q.running == 2
    waiting = [q.arrive("a", 0.1 * i) for i in range(1, 5)]
    assert all(w.state == WAITING for w in waiting) and q.waiting == 4
    served = []
    for t in range(4):
        served += admitted(q.release(1.0 + t))
    assert served == waiting  # first come, first served
    assert q.running == 2 and q.waiting == 0


def test_a_new_turn_never_overtakes_waiting_ones():
    q = FairQueue(slots=1, max_waiting=10)
    q.arrive("a", 0.0)
    early = q.arrive("a", 0.1)
    changed = q.release(0.5)  # the slot goes to the waiter, not to whoever comes next
    assert admitted(changed) == [early]
    late = q.arrive("a", 0.5)
    assert late.state == WAITING


def test_round_robin_across_tenants_so_a_busy_tenant_cannot_starve_another():
    q = FairQueue(slots=1, max_waiting=100)
    q.arrive("busy", 0.0)
    busy = [q.arrive("busy", 0.01 * i) for i in range(1, 21)]
    quiet = [q.arrive("quiet", 1.0), q.arrive("quiet", 1.1)]
    order = []
    for t in range(6):
        order += admitted(q.release(2.0 + t))
    # quiet arrived behind 20 busy turns, yet it is served every other slot
    assert [w.tenant for w in order] == ["busy", "quiet", "busy", "quiet", "busy", "busy"]
    assert [w for w in order if w.tenant == "busy"] == busy[:4]  # FIFO within a tenant
    assert [w for w in order if w.tenant == "quiet"] == quiet


def test_bounds_total_and_per_tenant_refuse_at_once():
    q = FairQueue(slots=1, max_waiting=3, tenant_max_waiting=2)
    q.arrive("a", 0.0)
    assert q.arrive("a", 0.0).state == WAITING and q.arrive("a", 0.0).state == WAITING
    refused = q.arrive("a", 0.0)
    assert isinstance(refused, Refusal) and refused.reason == "tenant_queue_full"
    assert q.arrive("b", 0.0).state == WAITING  # another tenant still has room
    full = q.arrive("c", 0.0)
    assert isinstance(full, Refusal) and full.reason == "queue_full"
    assert "1 turns in flight and 3 waiting" in full.message
    assert q.waiting == 3  # a refusal changes nothing
    none = FairQueue(slots=1, max_waiting=0)
    none.arrive("a", 0.0)
    assert isinstance(none.arrive("a", 0.0), Refusal)  # max_waiting 0: the old shedding
    with pytest.raises(ValueError):
        FairQueue(slots=0, max_waiting=1)


def test_waiters_past_their_deadline_expire_and_free_their_place():
    q = FairQueue(slots=1, max_waiting=10, max_wait_s=5.0)
    q.arrive("a", 0.0)
    old = q.arrive("a", 0.0)
    young = q.arrive("a", 3.0)
    assert q.expire(4.9) == [] and old.state == WAITING
    assert q.expire(5.0) == [old] and old.state == EXPIRED and q.waiting == 1
    changed = q.release(9.0)  # young's deadline (8.0) passed as well: nobody is admitted
    assert changed == [young] and young.state == EXPIRED
    assert q.running == 0 and q.waiting == 0
    assert q.arrive("a", 9.0).state == ADMITTED


def test_cancel_removes_a_waiter_and_only_a_waiter():
    q = FairQueue(slots=1, max_waiting=10)
    running = q.arrive("a", 0.0)
    gone, kept = q.arrive("a", 0.0), q.arrive("b", 0.0)
    q.cancel(gone)
    assert gone.state == CANCELLED and q.waiting == 1
    q.cancel(running)  # not waiting: nothing to undo
    assert running.state == ADMITTED and q.running == 1
    assert admitted(q.release(1.0)) == [kept]
    with pytest.raises(RuntimeError):
        FairQueue(slots=1, max_waiting=1).release(0.0)


def test_drain_rate_counts_finishes_over_its_window():
    d = DrainRate(window_s=10.0)
    assert d.rate(0.0) is None
    for i in range(20):
        d.record(100.0 + 0.5 * i)  # 2 per second for 10 s
    assert d.rate(109.5) == pytest.approx(20 / 9.5)
    assert d.rate(115.0) == pytest.approx(10 / 10)  # those before 105 left the window
    assert d.rate(200.0) is None
    burst = DrainRate(window_s=10.0)
    for _ in range(5):
        burst.record(0.0)
    assert burst.rate(0.0) == 5.0  # a young window counts at least one second


def test_retry_after_is_the_queue_ahead_over_the_drain_rate():
    q = FairQueue(slots=1, max_waiting=8, max_wait_s=1000.0, fallback_retry_s=7.0)
    q.arrive("a", 0.0)
    for _ in range(8):
        q.arrive("a", 0.0)
    refused = q.arrive("b", 0.0)
    assert refused.retry_after_s == 7.0  # nothing finished yet: the configured fallback
    for t in range(4):  # 4 finishes in 4 s: 1 per second; 4 waiters got their slot...
        q.release(1.0 + t)
    for _ in range(4):  # ...and 4 more came
        q.arrive("a", 4.0)
    refused = q.arrive("b", 4.0)
    assert isinstance(refused, Refusal) and refused.reason == "queue_full"
    assert refused.retry_after_s == pytest.approx(8 / 1.0)  # 8 ahead at 1 per second
    for t in range(4):  # the drain speeds up to 2 per second
        q.release(4.25 + 0.5 * t)
    for _ in range(4):
        q.arrive("a", 6.0)
    faster = q.arrive("b", 6.0)
    assert faster.retry_after_s == pytest.approx(8 / (8 / 6.0))  # 8 finishes in 6 s
    assert faster.retry_after_s < refused.retry_after_s
    assert retry_after_header(5.75) == 6 and retry_after_header(0.2) == 1


def test_a_turn_that_would_wait_past_the_limit_is_refused_at_once():
    q = FairQueue(slots=1, max_waiting=100, max_wait_s=10.0, drain=DrainRate(window_s=2.0))
    q.arrive("a", 0.0)
    q.arrive("a", 0.0)
    q.release(1.0)  # 1 finished by t=1, watched since 0
    early = [q.arrive("a", 1.0) for _ in range(12)]
    assert all(w.state == WAITING for w in early)  # 1/s is no measurement yet: none refused
    for w in early:
        q.cancel(w)
    q.arrive("a", 1.0)
    q.release(2.0)  # 2 finished by t=2 over a full window: 1 per second, measured
    for _ in range(10):
        assert q.arrive("a", 2.0).state == WAITING  # the 10th would wait ~10 s: still fine
    refused = q.arrive("a", 2.0)
    assert isinstance(refused, Refusal) and refused.reason == "wait_too_long"
    assert refused.retry_after_s == pytest.approx(10.0)  # capped at max_wait_s
    # another tenant would be served every other slot: its wait is short enough
    assert q.arrive("b", 2.0).state == WAITING
    assert q.ahead_of("b") == 3 and q.ahead_of("a") == 11


def test_gateway_config_refuses_bad_admission_flags_by_name():
    from services.gateway.config import GatewayConfig

    for kwargs, flag in [({"max_waiting": -1}, "--max-waiting"),
                         ({"max_in_flight": 0}, "--max-in-flight"),
                         ({"max_queue_wait_s": float("nan")}, "--max-queue-wait-s"),
                         ({"tenant_rate": -0.5}, "--tenant-rate")]:
        with pytest.raises(ValueError, match=flag):
            GatewayConfig(**kwargs)


def test_load_report_counts_unserved_turns_and_judges_fair_waits():
    from bench.load.records import OK, SHED_429, Attempt
    from bench.load.verdict import fair_wait, report

    attempts = [Attempt("s", 0, 0, 0.0, 200, OK, end_s=10.0),
                Attempt("s", 1, 0, 20.0, 429, SHED_429, end_s=20.0),
                Attempt("s", 1, 1, 25.0, 200, OK, end_s=60.0),   # waited 40 s in all
                Attempt("t", 0, 0, 0.0, 200, OK, end_s=12.0),
                Attempt("t", 1, 0, 30.0, 429, SHED_429, end_s=30.0)]  # never served
    out = report(attempts, [], sessions=2, duration_s=60, warmup_s=0, max_tokens=8,
                 queue_bound=None)
    assert out["turns_sent"] == 4 and out["turns_unserved"] == 1
    assert out["turns_shed_until_end"] == 1 and out["shed_429"] == 2
    assert out["turn_wait_s"]["max"] == 40.0
    assert out["verdict"]["fair_wait"] is False  # 40 s > 3 x the median (12 s)
    assert fair_wait([10.0, 12.0, 30.0]) is True and fair_wait([]) is None


def test_a_turn_the_back_end_refused_keeps_its_place_and_the_slots_shrink():
    q = FairQueue(slots=4, max_waiting=10)
    held = [q.arrive("a", 0.0) for _ in range(4)]
    behind = [q.arrive("a", 0.1), q.arrive("b", 0.2)]
    refused = held[3]
    assert q.requeue(refused, 0.5) == []  # back end holds 3 of ours: the 4th slot closes
    assert q.capacity == 3 and q.running == 3 and refused.state == WAITING
    changed = q.release(1.0)  # a turn finished: the refused one goes first, ahead of all
    assert admitted(changed) == [refused] and q.running == 3
    assert q.capacity == pytest.approx(3 + 1 / 3)  # and the slots grow back, slowly
    assert admitted(q.release(1.1)) == [behind[1]]  # then round-robin: b's turn, then a's
    for t in range(10):
        q.release(2.0 + t)
        q.arrive("c", 2.0 + t)
    assert q.capacity == 4.0  # never past `slots`
    with pytest.raises(RuntimeError):
        q.requeue(Waiter("x", 0.0, 1.0), 3.0)  # holds no slot


def test_a_requeued_turn_alone_is_granted_again_and_its_tenant_goes_first():
    q = FairQueue(slots=2, max_waiting=10)
    mine = q.arrive("a", 0.0)
    assert admitted(q.requeue(mine, 0.1)) == [mine]  # nothing else of ours: capacity 1
    assert q.capacity == 1 and q.running == 1
    other = q.arrive("b", 0.2)
    second = q.arrive("a", 0.3)
    assert admitted(q.requeue(mine, 0.4)) == [mine]  # head of the round, before b
    assert other.state == WAITING and second.state == WAITING


def test_the_gateway_never_keeps_a_turn_waiting_past_its_request_timeout():
    from services.gateway.app import Gateway
    from services.gateway.config import GatewayConfig

    short = Gateway(GatewayConfig(request_timeout_s=30.0, max_queue_wait_s=120.0))
    assert short.admission.queue.max_wait_s == 30.0
    assert Gateway(GatewayConfig()).admission.queue.max_wait_s == 120.0


def test_a_batch_holds_a_slot_per_turn_and_waits_for_them_in_its_place():
    q = FairQueue(slots=4, max_waiting=10)
    wide = q.arrive("a", 0.0, turns=3)
    one = q.arrive("b", 0.1)
    assert wide.state == ADMITTED and one.state == ADMITTED and q.running == 4
    second = q.arrive("c", 0.2, turns=2)
    after = q.arrive("d", 0.3)  # one slot would do, but it came after the batch
    assert second.state == WAITING and after.state == WAITING
    assert admitted(q.release(1.0)) == []  # b's slot alone: the batch at the head needs 2
    assert q.running == 3 and after.state == WAITING
    assert admitted(q.release(1.1, turns=3)) == [second, after]  # then both, in order
    assert q.running == 3
    with pytest.raises(ValueError):
        q.arrive("a", 2.0, turns=5)  # wider than every slot: the gateway caps it first
    with pytest.raises(ValueError):
        q.arrive("a", 2.0, turns=0)


def test_a_batch_wider_than_the_shrunk_slots_goes_alone_and_is_never_kept_out():
    q = FairQueue(slots=4, max_waiting=10)
    held = q.arrive("a", 0.0)
    q.requeue(held, 0.1)  # the back end is full: the slots shrink to 1, and it runs again
    assert held.state == ADMITTED and q.capacity == 1
    wide = q.arrive("b", 0.2, turns=4)
    assert wide.state == WAITING
    assert admitted(q.release(0.5, finished=False)) == [wide]  # alone, all 4 at once
    assert q.running == 4
    # refused as full again: its 4 turns leave, and alone it is let through again at once
    assert admitted(q.requeue(wide, 0.6)) == [wide] and q.running == 4 and q.capacity == 1
