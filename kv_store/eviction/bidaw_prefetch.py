"""Bidaw-prefetch: bidaw-size's eviction, plus what promotion needs from the same prediction.

Eviction is bidaw-size's, except for promoted sessions not back yet and sessions likely ended
(below). Predictive promotion
(SSD -> DRAM before the user returns) asks the policy three things, all answered from the one
return-time model it evicts with (its ThinkTimeModel, per answer length, scaled by the user's own
pace): when an evicted session is expected back (`return_window`: a central and a high quantile
of its next gap), whether its KV is worth the DRAM of the entry it would push out
(`prefetch_allowed`: only if the policy's next victims are stale or together worth less, i.e.
less likely to be reused in time), and to take it in without counting an access
(`admit_prefetched`: no think time observed, the idle clock keeps running, so the user's real
return is what the model learns from). The live store, and the replay with SSD time, also tell
it when a turn arrives (`observe_arrival`, arrival_learning.py), before its KV is read. Pure:
time is an argument.

Whether a session returns at all (SessionEndModel: per turns so far, latest answer's length and
the user's pace, learned online, weighed by the silence so far) scales each entry's worth, drops
candidates unlikely to return, and sets when a promoted session not back yet counts as ended:
inside its return window it goes only when nothing else can (its mean excess would otherwise
make a promotion due any moment the first victim), and it goes first once its chance of
returning falls below `min_return_chance`, never before the window's end. With an end oracle
ends are announced, the learned chance stays near 1 and a promotion is kept; without one it
ends at about the window's end. The same chance
ends any entry once it falls below `stale_chance` (more likely ended than not: it goes first,
instead of holding DRAM until bidaw-size's q99), but not before its return window's end (the
silence must say so, not the turn bucket's prior alone: where most sessions of a bucket end,
e.g. Mooncake's one-turn ones, p < 0.5 would evict them all the moment their turn is done,
the quarter that return with them). `prefetch_cost` (the KV's bytes) orders the
due candidates once the disk has fallen behind them (PrefetchPlanner): then the disk time
demand reads leave serves the most turns; `prefetch_tries` due candidates are weighed before a
refusal leaves the disk idle.
`victim_margin` > 1 counts the victims' worth that many times (fewer promotions and bytes,
fewer hits; docs/policies.md has the measurements). The ranking's size exponent follows the
disk's demand reads as in bidaw-size (`observe_demand_read`, `loaded_size_exponent`), and so
does the promotion horizon (`prefetch_horizon`: `horizon_s` → `loaded_horizon_s`).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Callable

from kv_store.eviction.arrival_learning import ArrivalLearning
from kv_store.eviction.base import Key
from kv_store.eviction.bidaw_size import BidawSizePolicy
from kv_store.eviction.evicted_wait import EvictedWait
from kv_store.eviction.session_end_model import PACE_EDGES, SessionEndModel
from kv_store.eviction.think_time_model import GAP_EDGES, GapStats, ThinkTimeModel


class BidawPrefetchPolicy(ArrivalLearning, BidawSizePolicy):
    name = "bidaw-prefetch"

    def __init__(self, horizon_s: float = 30.0, return_quantile: float = 0.5,
                 high_quantile: float = 0.9, min_return_chance: float = 0.7,
                 end_after_s: float | None = 600.0, victim_margin: float = 1.0,
                 keep_promoted: bool = True, stale_chance: float | None = 0.5,
                 chance_after_window: bool = True, cost_order: bool = True,
                 prefetch_tries: int = 8, loaded_horizon_s: float | None = 5.0,
                 end_answer_shrink: float | None = 20.0,
                 end_pace_edges: tuple[float, ...] | None = PACE_EDGES,
                 access_share: float | None = 0.97,
                 evicted_wait_share: float | None = 0.5, **kwargs) -> None:
        if not 0.0 < return_quantile < high_quantile < 1.0:
            raise ValueError("bidaw-prefetch needs 0 < return_quantile < high_quantile < 1 "
                             f"(got {return_quantile}, {high_quantile})")
        if horizon_s < 0 or (loaded_horizon_s is not None and loaded_horizon_s < 0):
            raise ValueError("bidaw-prefetch needs horizon_s >= 0 and loaded_horizon_s >= 0 or "
                             f"null (got {horizon_s}, {loaded_horizon_s})")
        if evicted_wait_share is not None and evicted_wait_share <= 0:
            raise ValueError("bidaw-prefetch needs evicted_wait_share > 0 or null "
                             f"(got {evicted_wait_share})")
        super().__init__(**kwargs)
        self.horizon_s = horizon_s  # promote once the expected return is this close (PrefetchPlanner)
        # ... with an idle disk; towards this as demand reads fill it (None: fixed)
        self.loaded_horizon_s = loaded_horizon_s
        # ... and at most this share of how far off the entries DRAM evicts are expected back
        # (EvictedWait; None: no cap, the disk's load alone sets it)
        self.evicted_wait_share = evicted_wait_share
        self.evicted_wait = EvictedWait()
        self._chosen_at: tuple[Key | None, float] = (None, 0.0)  # the latest victim, and when
        self.return_quantile = return_quantile
        self.high_quantile = high_quantile
        # whether a session comes back at all (None: every one does, the first version), per
        # turns so far, latest answer and pace (end_answer_shrink None: per turns only, as
        # before; end_pace_edges None: the pace not used)
        self.ends = (None if end_after_s is None
                     else SessionEndModel(end_after_s, answer_shrink=end_answer_shrink,
                                          pace_edges=end_pace_edges))
        self.min_return_chance = min_return_chance  # below it at promotion time: no candidate
        self.victim_margin = victim_margin          # victims must be worth < gain / margin
        # promoted, not back yet: key -> the end of its return window (until then kept, if
        # anything else can go: it was read because it is due, its mean excess says otherwise)
        self.keep_promoted = keep_promoted
        # an entry counts as ended (goes first) once its chance of returning is below this
        self.stale_chance = stale_chance
        self.chance_after_window = chance_after_window  # ... never before the window's end
        self.cost_order = cost_order          # False: the planner promotes soonest-first always
        self.prefetch_tries = prefetch_tries  # due candidates weighed before the disk idles
        self._awaited: dict[Key, float] = {}
        # a return heard at its arrival: the ranking's models learn it at the access, as
        # bidaw-size's do, once demand reads take this share of the disk (arrival_learning.py;
        # 0: always; None: always at the arrival, the first version)
        self.access_share = access_share
        self._heard: dict[Key, tuple[float, float, int]] = {}
        # the same model bidaw-size builds, asked for two more quantiles (defaults already held)
        self.think = ThinkTimeModel(extra_quantiles=(self.stale_quantile, return_quantile,
                                                     high_quantile))

    def return_window(self, key: Key) -> tuple[float, float] | None:
        """(expected return, latest plausible return) of `key`'s next turn in the policy's clock:
        its last activity plus the `return_quantile` / `high_quantile` of the think time after
        its latest answer, at its own pace. None for a session the policy does not know."""
        s = self._sessions.get(key)
        if s is None or s.last is None:
            return None
        window = self._window(s)
        # asked at eviction; the chance that matters is the one when promotion would start
        at = max(window[0] - self.horizon_s, s.last)
        if self.return_chance(s, at) < self.min_return_chance:
            return None
        return window

    def prefetch_horizon(self, now: float) -> float:
        """How close a candidate's expected return must be for promotion to start, at `now`:
        `horizon_s` with an idle disk, moving to `loaded_horizon_s` as demand reads fill it
        (the share bidaw-size's β follows). A promoted session holds its DRAM from the read to
        its return; where demand reads fill the disk everything out of DRAM is read again, so
        DRAM is what is scarce and a promotion should hold it for less (the return's spread is
        then covered by fewer, later reads). No demand reads reported: `horizon_s`. Whatever
        the disk, at most `evicted_wait_share` of the wait the ranking's victims are expected
        back in (EvictedWait): where DRAM is scarce a fast disk's idle time is spent late."""
        lo = self.loaded_horizon_s
        h = (self.horizon_s if lo is None
             else self.horizon_s + (lo - self.horizon_s) * self.demand.share(now))
        typical, share = self.evicted_wait.typical(), self.evicted_wait_share
        if share is not None and typical is not None:
            h = min(h, share * typical)
        return h

    def prefetch_cost(self, key: Key) -> float | None:
        """What promoting `key` costs per turn it may serve, for PrefetchPlanner to order due
        candidates by once the disk is behind: its KV bytes (the disk time demand reads leave
        is what promotion spends; hit rate counts turns). None: unknown, or `cost_order` off."""
        s = self._sessions.get(key)
        if not self.cost_order or s is None or s.last is None:
            return None
        return float(s.size)

    def _window(self, s) -> tuple[float, float]:
        q = self.think.stats(s.answer).quantiles
        f = math.exp(s.pace)
        return s.last + q[self.return_quantile] * f, s.last + q[self.high_quantile] * f

    def return_chance(self, s, now: float) -> float:
        """P(session `s` has another turn | its turns so far, idle since `s.last`): the
        SessionEndModel's estimate, weighed by how unusual the silence is for a returning user
        (the think-time model's survival at its pace). 1 while a turn is under way, for a user
        whose own gaps predict it (SignalModel) and without an end model."""
        if self.ends is None or s.answer is None or s.last is None or self._flat(s):
            return 1.0
        idle = (now - s.last) / math.exp(s.pace)
        survival = _survival(self.think.stats(s.answer), idle)
        return self.ends.chance(s.turns, survival, s.answer, s.pace)

    def _worth(self, s, now: float) -> float:
        """An entry's worth in DRAM, as `prefetch_victims` weighs it: the rate at which it is
        expected to be hit, 1 / expected remaining wait, times the chance it returns at all."""
        return self.return_chance(s, now) / max(self.expected_remaining(s, now), 1e-3)

    def score(self, key: Key, now: float) -> float:
        """The eviction score (larger goes first): expected remaining wait × size^β."""
        s = self._sessions.get(key)
        if s is None:
            return math.inf
        beta = self.size_exponent
        return self.expected_remaining(s, now) * (s.size ** beta if beta != 1.0 else s.size)

    def prefetch_allowed(self, key: Key, size: int, now: float, need: int,
                         size_of: Callable[[Key], int]) -> bool:
        """Whether `key` (not in the tier) may push out the `need` bytes of the policy's next
        victims (`size_of`: their bytes). Each entry is worth 1 / its expected remaining wait
        (the rate at which it is expected to be hit; a stale one nothing): the victims together
        must be worth less than `key`, so one large promotion never costs several likelier hits.
        A look only: nothing is evicted."""
        return self.prefetch_victims(key, now, need, size_of) is not None

    def prefetch_victims(self, key: Key, now: float, need: int, size_of: Callable[[Key], int],
                         exclude: frozenset | set = frozenset()) -> list[Key] | None:
        """The entries `prefetch_allowed` weighs, in eviction order, never one in `exclude`
        (leased or pinned: the store's); None if `key` is not worth them. Fewer than `need`
        bytes when the policy runs out of victims (the caller's room-making then fails)."""
        s = self._sessions.get(key)
        if s is None:
            return None
        gain = self._worth(s, now)
        gain /= self.victim_margin
        chosen, seen, lost, victims = self._victim, set(exclude), 0.0, []
        try:
            while need > 0:
                v = self.victim(now, seen)
                if v is None:
                    return victims
                if not self.stale_at(v, now):
                    lost += self._worth(self._sessions.get(v), now)
                    if lost >= gain:
                        return None
                seen.add(v)
                victims.append(v)
                need -= size_of(v)
            return victims
        finally:
            self._victim = chosen  # a look, not an eviction: the return model must not see it

    def admit_prefetched(self, key: Key, size: int, now: float) -> None:
        """`key` enters the tier by promotion: ranked as bidaw-size would, but no access."""
        s = self._sessions.get(key)
        if s is None:  # forgotten meanwhile: an ordinary entry
            self.admit(key, size, now)
            return
        self._seq += 1
        self._entered[key] = self._seq
        s.size = size
        self._rank(key, s)
        self._awaited[key] = self._window(s)[1]
        if self.stale_quantile is not None:
            # a guess: if the user is not back by the window's end, it goes first (else an ended
            # session would hold DRAM until the far stale deadline); a return re-ranks it
            # (never before the window's end: `stale_chance` may have set it sooner, but the
            # session was read because it is due)
            latest = self._promotion_deadline(s)
            deadline, order = self._stale.priority(key)
            deadline = min(latest, max(deadline, self._awaited[key]))
            self._stale.set(key, (deadline, order))

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        """bidaw-size's victim, but a promoted session still inside its return window goes only
        when nothing else can (it was read because it is due; its mean excess says otherwise)."""
        k = None
        if self.keep_promoted and self._awaited:
            due = [key for key, latest in self._awaited.items() if latest > now]
            if due:
                k = super().victim(now, set(exclude).union(due))
        if k is None:
            k = super().victim(now, exclude)
        self._chosen_at = (k, now)  # if it is evicted, its wait is learnt (`_note_removal`)
        return k

    def _stale_idle(self, s, stats: GapStats, quantile: float) -> float:
        """bidaw-size's stale deadline, or sooner the idle time at which the session's chance of
        returning (SessionEndModel's p for its turns, weighed by the silence) falls below
        `stale_chance`: more likely ended than not, at 0.5, though never before the end of its
        return window (`high_quantile`; `chance_after_window`). Where ends are announced p stays
        near 1 and this never binds; without, ended sessions stop holding DRAM until the q99."""
        idle = super()._stale_idle(s, stats, quantile)
        c = self.stale_chance
        if c is None or self.ends is None:
            return idle
        p = self.ends.probability(s.turns, s.answer, s.pace)
        tail = 1.0 if p <= c else c * (1.0 - p) / ((1.0 - c) * p)  # p·S / (p·S + 1 - p) = c
        ended = stats.gap_at_survival(tail)
        if self.chance_after_window:
            ended = max(ended, stats.quantiles[self.high_quantile])
        return min(idle, ended)

    def _promotion_deadline(self, s) -> float:
        """When a promoted session not back yet has probably ended: the end of its return
        window, or with an end model the moment its chance of returning falls below
        `min_return_chance` (never, in effect, where ends are announced: p near 1)."""
        if self.ends is None:
            return self._window(s)[1]
        p, c = self.ends.probability(s.turns, s.answer, s.pace), self.min_return_chance
        if p <= c:
            return self._window(s)[1]
        stats = self.think.stats(s.answer)
        tail = c * (1.0 - p) / ((1.0 - c) * p)   # p·S / (p·S + 1 - p) = c
        return max(s.last + stats.gap_at_survival(tail) * math.exp(s.pace), self._window(s)[1])

    def _note_removal(self, key: Key) -> None:
        self._awaited.pop(key, None)
        chosen, at = self._chosen_at  # an eviction, not a look: how far off it was expected
        s = self._sessions.get(key)
        if key == self._victim == chosen and s is not None and not self.stale_at(key, at):
            self.evicted_wait.observe(self.expected_remaining(s, at))
        if key != self._victim and self.ends is not None:
            self.ends.forget(key)  # freed, not evicted: its end was announced
        super()._note_removal(key)


def _survival(stats: GapStats, idle: float) -> float:
    """P(think time >= `idle`) in `stats` (at bin-edge resolution)."""
    i = bisect_right(GAP_EDGES, idle) - 1
    if i < 0:
        return 1.0
    return -stats.neg_survival[min(i, len(stats.neg_survival) - 1)]
