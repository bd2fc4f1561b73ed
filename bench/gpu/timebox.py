"""Each section of the GPU check within its own time, its error reported instead of raised."""
from __future__ import annotations

import signal
import threading
import time
from typing import Callable

MIN_SECTION_S = 5.0  # less time left than this: the section is skipped, and says so


class SectionTimeout(BaseException):
    """Raised by the alarm inside a section; a BaseException so that code catching Exception
    inside the section cannot swallow it."""


class Timebox:
    """Sections share one total; each gets the smaller of its budget and what is left."""

    def __init__(self, total_s: float, min_s: float = MIN_SECTION_S) -> None:
        self.total_s, self.min_s = total_s, min_s
        self.deadline = time.monotonic() + total_s

    def budget(self, wanted_s: float) -> float:
        return max(0.0, min(wanted_s, self.deadline - time.monotonic()))

    def run(self, wanted_s: float, fn: Callable[[float], dict], alarm: bool = True) -> dict:
        """fn(budget_s) -> its figures, plus `wall_s`; `error` (and no figures) if it raised or
        ran past the budget; `skipped` if the total was spent. `alarm`: interrupt fn at its
        budget (main thread only); sections running a subprocess bound it themselves."""
        budget = self.budget(wanted_s)
        if budget < self.min_s:
            return {"skipped": f"the {self.total_s:.0f} s total was spent", "wall_s": 0.0}
        start = time.monotonic()
        armed = alarm and threading.current_thread() is threading.main_thread()
        if armed:
            previous = signal.signal(signal.SIGALRM, _raise_timeout)
            signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            out = fn(budget)
        except SectionTimeout:
            out = {"error": f"ran past its {budget:.0f} s budget"}
        except Exception as exc:  # noqa: BLE001 - a failed section is a figure, not an abort
            out = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        out["wall_s"] = round(time.monotonic() - start, 2)
        return out


def _raise_timeout(*_signal) -> None:
    raise SectionTimeout
