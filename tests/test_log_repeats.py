"""A tracing collector that is down: the OpenTelemetry exporter's WARNING and ERROR for every
batch of spans are bounded to one per kind every few minutes, with a count of those held back;
our own lines all pass. Real logging records through a real handler; the clock is given."""
from __future__ import annotations

import logging

from services.runtime.log_repeats import Reminder, RepeatFilter, since


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_library_repeats_are_bounded_and_counted_ours_all_pass():
    clock, lines = Clock(), []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append((record.name, record.getMessage()))
    handler.addFilter(RepeatFilter("opentelemetry", every_s=300.0, clock=clock))
    otel = logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter")
    ours = logging.getLogger("bidaw.scheduler")
    for logger in (otel, ours):
        logger.addHandler(handler)
        logger.propagate = False
    try:
        for i in range(40):  # every 5 s for 200 s: 40 batches failed
            clock.t = 5.0 * i
            otel.error("Failed to export traces to %s, error code: %s", "127.0.0.1:1", 14)
            ours.warning("awareness stream lost; reconnecting")
        clock.t = 305.0
        otel.error("Failed to export traces to %s, error code: %s", "127.0.0.1:1", 14)
        otel.warning("Transient error %s encountered", "UNAVAILABLE")  # another kind: passes
    finally:
        for logger in (otel, ours):
            logger.removeHandler(handler)
            logger.propagate = True
    exported = [m for n, m in lines if n.startswith("opentelemetry")]
    assert exported == [
        "Failed to export traces to 127.0.0.1:1, error code: 14",
        "Failed to export traces to 127.0.0.1:1, error code: 14 (39 more like it in the last "
        "305 s)",
        "Transient error UNAVAILABLE encountered"]
    assert sum(1 for n, _ in lines if n == "bidaw.scheduler") == 40


def test_a_reminder_says_the_first_then_one_a_period_with_the_count():
    clock = Clock()
    said = Reminder(every_s=300.0, clock=clock)
    got = []
    for _ in range(50):  # every 10 s for 500 s
        got.append(said.due())
        clock.t += 10.0
    assert got[0] == 0 and got[30] == 29  # the first at once; at 300 s, the 29 held back
    assert [i for i, held in enumerate(got) if held is not None] == [0, 30]
    assert since(29) == " (29 more like it since the last such line)" and since(0) == ""
