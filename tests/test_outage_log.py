"""A link that keeps failing (the scheduler's Awareness stream while the store is down) is one
WARNING, a reminder every few minutes, and one line when it is back: it was an INFO line every
4 s. The real Outage with real logging, a given clock; and the real scheduler with no store."""
from __future__ import annotations

import logging
import time

from services.runtime.outage import Outage


def test_a_long_outage_is_three_lines_not_hundreds(caplog):
    clock = [0.0]
    outage = Outage("awareness stream to 127.0.0.1:1", remind_s=300.0, clock=lambda: clock[0])
    with caplog.at_level(logging.INFO, logger="bidaw.link"):
        for i in range(451):  # 30 minutes of tries, one every 4 s
            clock[0] = 4.0 * i
            outage.failed("UNAVAILABLE")
        outage.ended()
        outage.ended()  # already up: nothing more
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "awareness stream to 127.0.0.1:1 lost (UNAVAILABLE); reconnecting"
    assert said[1] == ("awareness stream to 127.0.0.1:1 still down after 300 s (76 tries; "
                       "last: UNAVAILABLE); reconnecting")
    assert len(said) == 1 + 6 + 1 and said[-1] == "awareness stream to 127.0.0.1:1 back after 1800 s"
    outage.failed("UNAVAILABLE")  # a new outage is said again
    assert caplog.records[-1].getMessage().endswith("lost (UNAVAILABLE); reconnecting")


def test_the_scheduler_without_its_store_says_it_once(caplog):
    from scheduler.config import SchedulerConfig
    from scheduler.main import start

    with caplog.at_level(logging.INFO):
        server, service = start(SchedulerConfig(listen="127.0.0.1:0", workers=[],
                                                store="127.0.0.1:1"))
        try:
            time.sleep(7)  # 6 tries: at 0, 0.2, 0.6, 1.4, 3, 6.2 s (a 0.2-s backoff, doubling)
        finally:
            server.stop(0)
    lost = [r for r in caplog.records if "awareness stream to 127.0.0.1:1" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelname == "WARNING", [r.getMessage() for r in lost]
