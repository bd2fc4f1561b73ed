"""When bidaw-prefetch's models learn that a user came back (a mixin for BidawPrefetchPolicy).

The live store, and the replay with SSD time, tell the policy when a turn ARRIVES
(`observe_arrival`), a queue wait before its KV is read; on a disk saturated by demand reads that
wait is minutes. The end model learns the return at the arrival: promotion must beat arrivals,
not reads. The session waits for its answer from then on (no think time runs, and no later
read learns a second gap).

The ranking's own models (think time, the user's pace and signal, the one-turn ReturnModel:
bidaw-size's) learn the same gap, the arrival's, at the arrival too while the disk has idle time
(promotion runs, and predicts from the freshest model), but once demand reads take
`access_share` of the disk (DemandShare, 0.97), at the access, as bidaw-size's do. There no
promotion starts and the ranking is all the policy does: learnt minutes sooner, the same gaps
made every ranking after that differ from bidaw-size's by chance. Now, on a saturated disk, a
bidaw-prefetch that does not promote evicts as bidaw-size does, decision for decision
(docs/policies.md, "The ranking on a saturated disk"). None: always at the arrival, the first
version; 0: always at the access.
"""
from __future__ import annotations

from kv_store.eviction.answer_ranked import SAME_TURN_S
from kv_store.eviction.base import Key

MAX_HEARD = 100_000  # arrivals whose access never came (the oracle ended them mid-read)


class ArrivalLearning:
    access_share: float | None = 0.97
    _heard: dict

    def observe_arrival(self, key: Key, now: float) -> None:
        """A turn of `key` arrived at `now`, before its KV is read. (The replay without SSD time,
        whose access is the arrival, never calls it.)"""
        s = self._sessions.get(key)
        heard = self._heard.get(key)
        if heard is not None and s is not None and s.answer is None:
            # another turn before the first one's access: that access serves the later turn (the
            # replay merges them), whose arrival bidaw-size's access then carries
            self._heard[key] = (now,) + heard[1:]
            return
        if s is None or s.last is None or s.answer is None:
            return
        if self.ends is not None:
            self.ends.returned(key, now)
        th = self.access_share
        if th is not None and self.demand.share(now) >= th:
            self._heard[key] = (now, s.last, s.answer)  # learnt at the access (below)
            if len(self._heard) > MAX_HEARD:
                del self._heard[next(iter(self._heard))]
        else:
            self._heard.pop(key, None)  # one whose access never came: not learnt later
            self._note_return(key, now)
            self._learn_gap(s, now - s.last)
        s.last, s.answer = now, None  # until this turn's answer: the read observes no gap
        if key in self._entered:
            self._rank(key, s)

    def observe_answer(self, key: Key, answer_tokens: int, now: float) -> None:
        super().observe_answer(key, answer_tokens, now)
        if self.ends is not None:
            s = self._sessions.get(key)
            self.ends.finished(key, s.turns, now, s.answer, s.pace)

    def _access(self, key: Key, size: int, now: float) -> None:
        s = self._sessions.get(key)
        if (self.ends is not None and s is not None and s.answer is not None
                and s.last is not None and now - s.last >= SAME_TURN_S):
            self.ends.returned(key, now)
        self._awaited.pop(key, None)
        heard = self._heard.pop(key, None)
        if heard is not None and s is not None:
            # what bidaw-size's touch and access learn here, from the arrival's gap
            arrival, last, answer = heard
            if s.awaiting_second and arrival - last >= SAME_TURN_S and self.returns is not None:
                s.awaiting_second = False
                self.returns.returned(key, arrival)
            s.answer = answer
            self._learn_gap(s, arrival - last)
            s.answer = None
        super()._access(key, size, now)
