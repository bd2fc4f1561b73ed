"""How a link that keeps failing is logged: the first failure as a WARNING, then a reminder
every few minutes while it stays down, and one line when it is back. A store down for half an
hour was 450 identical lines from the scheduler's reconnect loop, one every 4 s."""
from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("bidaw.link")


class Outage:
    def __init__(self, what: str, remind_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, logger: logging.Logger = log):
        self.what = what
        self.remind_s = remind_s
        self.clock = clock
        self.log = logger
        self._since: float | None = None   # when the link went down (None: up)
        self._said = 0.0                   # when it was last said
        self._tries = 0

    def failed(self, why: str) -> None:
        """One more failed try (reconnecting follows)."""
        now = self.clock()
        self._tries += 1
        if self._since is None:
            self._since, self._said, self._tries = now, now, 1
            self.log.warning("%s lost (%s); reconnecting", self.what, why)
        elif now - self._said >= self.remind_s:
            self._said = now
            self.log.warning("%s still down after %.0f s (%d tries; last: %s); reconnecting",
                             self.what, now - self._since, self._tries, why)

    def ended(self) -> None:
        """The link works (again)."""
        if self._since is not None:
            self.log.info("%s back after %.0f s", self.what, self.clock() - self._since)
            self._since = None
