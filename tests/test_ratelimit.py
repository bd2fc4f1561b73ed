"""Per-tenant admission in the gateway: the pure token bucket and in-flight cap, then the same
limits over HTTP against a real gateway (fake scheduler), tenant by tenant."""
from __future__ import annotations

import threading
import time

import pytest

from scheduler.session_locks import SessionLocks
from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from services.gateway.ratelimit import InFlight, RateLimiter, retry_after_s
from tests.test_gateway_api import assert_error, chat_body, fake, post  # noqa: F401 (fixture)


# -- the pure parts ---------------------------------------------------------------------------

def test_burst_then_refill_at_the_rate():
    rl = RateLimiter(rate=2.0, burst=3)
    assert [rl.acquire("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst
    assert rl.acquire("a", 0.0) == pytest.approx(0.5)  # one token comes every 1/rate s
    assert rl.acquire("a", 0.25) == pytest.approx(0.25)  # a refused request takes nothing
    assert rl.acquire("a", 0.5) == 0.0
    assert rl.acquire("a", 0.5) > 0
    # long idle refills only up to the burst, never beyond
    assert [rl.acquire("a", 100.0) for _ in range(4)].count(0.0) == 3


def test_keys_are_independent_and_rate_zero_is_off():
    rl = RateLimiter(rate=1.0, burst=1)
    assert rl.acquire("a", 0.0) == 0.0 and rl.acquire("a", 0.0) > 0
    assert rl.acquire("b", 0.0) == 0.0  # b is not charged for a
    off = RateLimiter(rate=0.0)
    assert not off.enabled and all(off.acquire("a", 0.0) == 0.0 for _ in range(1000))
    assert len(off) == 0
    assert RateLimiter(rate=0.5).burst == 1.0 and RateLimiter(rate=10).burst == 10.0
    with pytest.raises(ValueError):
        RateLimiter(rate=-1)


def test_retry_after_is_whole_seconds_rounded_up():
    rl = RateLimiter(rate=0.25, burst=1)
    rl.acquire("a", 0.0)
    wait = rl.acquire("a", 1.0)
    assert wait == pytest.approx(3.0)
    assert retry_after_s(wait) == 3 and retry_after_s(0.01) == 1 and retry_after_s(3.2) == 4
    # a client that waits Retry-After is admitted
    assert rl.acquire("a", 1.0 + retry_after_s(wait)) == 0.0


def test_bucket_table_is_bounded():
    rl = RateLimiter(rate=1.0, burst=2, max_keys=100)
    for i in range(10_000):  # many tenants at once: least recently used ones are dropped
        rl.acquire(f"t{i}", 0.0)
        assert len(rl) <= 100
    # refilled buckets are dropped (equal to fresh ones): idle tenants leave no entry behind
    rl.acquire("late", 10.0)
    assert len(rl) == 1
    # an entry that was dropped while full behaves as before: a full burst
    assert [rl.acquire("t0", 10.0) for _ in range(3)].count(0.0) == 2


def test_in_flight_cap_per_key_leaves_no_idle_entries():
    cap = InFlight(2)
    assert cap.enter("a") and cap.enter("a") and not cap.enter("a")
    assert cap.enter("b")
    cap.leave("a")
    assert cap.enter("a")
    for key in ("a", "a", "b"):
        cap.leave(key)
    assert len(cap) == 0 and cap.count("a") == 0
    off = InFlight(0)
    assert all(off.enter("a") for _ in range(100)) and off.count("a") == 100


def test_session_locks_serialise_a_session_and_forget_it_after():
    locks = SessionLocks()
    order = []

    def second_turn():
        with locks.hold("s"):
            order.append("second")

    with locks.hold("s"):
        t = threading.Thread(target=second_turn)
        t.start()
        with locks.hold("other"):  # other sessions do not wait
            pass
        time.sleep(0.1)
        order.append("first")
        assert len(locks) == 1  # "other" is gone already; "s" has a holder and a waiter
    t.join(5)
    assert order == ["first", "second"]
    for i in range(1000):
        with locks.hold(f"s{i}"):
            pass
    assert len(locks) == 0  # no entry outlives its turns


# -- over HTTP --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def limited(fake):
    server, _ = fake
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}",
                           api_keys="acme:sk-acme,globex:sk-globex,initech:sk-initech",
                           tenant_rate=0.2, tenant_burst=2, tenant_max_in_flight=1,
                           request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_a_tenant_over_its_rate_gets_429_while_another_is_served(limited):
    # acme spends its burst of 2; at 0.2/s its next token is ~5 s away
    for _ in range(2):
        assert post(limited, "/v1/chat/completions", chat_body("hi"), auth("sk-acme"))[0] == 200
    status, headers, body = post(limited, "/v1/chat/completions", chat_body("hi"),
                                 auth("sk-acme"))
    assert_error(status, body, 429, "acme is over its rate")
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "rate_limit_exceeded"
    assert int(headers["Retry-After"]) in (4, 5)
    # globex has its own bucket
    for _ in range(2):
        assert post(limited, "/v1/chat/completions", chat_body("hi"),
                    auth("sk-globex"))[0] == 200
    # a refused request costs nothing, and a bad key is still 401 (auth comes first)
    assert post(limited, "/v1/chat/completions", chat_body("hi"), auth("sk-nope"))[0] == 401


def test_a_tenant_at_its_in_flight_cap_gets_429(limited, fake):
    _, scheduler = fake
    scheduler.release.clear()
    scheduler.blocked = 0
    results = []
    blocked = threading.Thread(target=lambda: results.append(post(
        limited, "/v1/chat/completions", chat_body("!block"), auth("sk-initech"))[0]))
    blocked.start()
    deadline = time.monotonic() + 15
    while scheduler.blocked < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    # initech still has a rate token, but its one turn in flight is its cap
    status, headers, body = post(limited, "/v1/chat/completions", chat_body("hi"),
                                 auth("sk-initech"))
    scheduler.release.set()
    blocked.join(30)
    assert_error(status, body, 429, "in flight")
    assert body["error"]["code"] == "tenant_concurrency_exceeded"
    assert headers["Retry-After"] == "1"
    assert results == [200]
    # the refusal did not take initech's second token: it is served now its turn is done
    assert post(limited, "/v1/chat/completions", chat_body("hi"), auth("sk-initech"))[0] == 200


def test_in_flight_counts_turns_and_a_request_may_hold_several():
    limit = InFlight(4)
    assert limit.enter("a", 3) and not limit.enter("a", 2) and limit.enter("a")
    assert limit.count("a") == 4 and not limit.enter("a")
    limit.leave("a", 3)
    assert limit.count("a") == 1 and limit.enter("b", 4)
    limit.leave("a")
    assert len(limit) == 1  # idle tenants leave no entry


@pytest.fixture(scope="module")
def three_each(fake):
    server, _ = fake
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}",
                           api_keys="acme:sk-acme,globex:sk-globex", tenant_max_in_flight=3,
                           max_in_flight=8, request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


@pytest.mark.parametrize("body", [
    {"model": "bidaw", "prompt": ["!block"] * 5, "max_tokens": 4},
    chat_body("!block", n=5, max_tokens=4)], ids=["five-prompts", "n-5"])
def test_a_batch_counts_each_turn_it_runs_against_its_tenants_limit(three_each, fake, body):
    _, scheduler = fake
    scheduler.release.clear()
    scheduler.blocked = 0
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    body = {**body, "model": chat_body("")["model"]}
    results = []
    batch = threading.Thread(target=lambda: results.append(post(
        three_each, path, body, auth("sk-acme"))))
    batch.start()
    try:
        deadline = time.monotonic() + 15
        while scheduler.blocked < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert scheduler.blocked == 3  # the tenant's 3, not the batch's own 16
        status, _, refused = post(three_each, "/v1/chat/completions", chat_body("hi"),
                                  auth("sk-acme"))
        assert_error(status, refused, 429, "acme has 3 of its 3 turns in flight")
        # another tenant is not held back by acme's batch
        assert post(three_each, "/v1/chat/completions", chat_body("hi"),
                    auth("sk-globex"))[0] == 200
    finally:
        scheduler.release.set()
        batch.join(30)
    status, _, answer = results[0]
    assert status == 200, answer
    assert len(answer["choices"]) == 5 and scheduler.blocked == 5
    # every turn left: the tenant may run a whole batch's width again
    assert post(three_each, "/v1/chat/completions", chat_body("hi", n=3, max_tokens=2),
                auth("sk-acme"))[0] == 200
