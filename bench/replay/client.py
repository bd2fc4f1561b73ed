"""The open-loop replayer: one coroutine per user on one event loop (grpc.aio), so thousands of
users cost no threads. A user's first turn goes out at its scripted start; each next turn
think_s after the previous answer's last token. A failed turn ends that user's script (its
conversation can no longer be continued as planned); turns past the deadline are not sent.
With `prepare_lead_s` a user's client says its next turn is coming (PrepareSession, as
POST /v1/sessions/{id}/prepare does when its user starts typing) that long before sending it,
never before the previous answer's end, and never for a turn that starts a new session.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Callable

import grpc

from bench.replay.plan import Plan, ScriptedTurn, UserScript
from bench.replay.records import ANSWERED, FAILED, QueueSample, TurnRecord
from bench.replay.tokens import query_tokens
from bench.sim.prepare_hints import check_prepare, prepares
from services.runtime.grpc_util import aio_channel
from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2, \
    scheduler_pb2_grpc

log = logging.getLogger("bidaw.replay")

TIERS = {common_pb2.TIER_NONE: "none", common_pb2.TIER_DRAM: "dram",
         common_pb2.TIER_SSD: "ssd", common_pb2.TIER_LOADING: "loading",
         common_pb2.TIER_UNSPECIFIED: "none"}
_OPTIONS = [("grpc.max_receive_message_length", 64 << 20)]
PREPARE_TIMEOUT_S = 10.0  # a prepare runs beside its turn, which never waits for it


@dataclass
class ReplayResult:
    records: list[TurnRecord]
    samples: list[QueueSample] = field(default_factory=list)
    wall_s: float = 0.0


def new_record(u: UserScript, t: ScriptedTurn, session_prefix: str) -> TurnRecord:
    return TurnRecord(user=u.user, index=t.index, session=session_prefix + t.session,
                      trace_round=t.trace_round, history_tokens=t.history_tokens,
                      query_tokens=t.query_len, answer_tokens=t.answer_len, think_s=t.think_s,
                      scheduled_s=u.start_s if t.index == 0 else 0.0)


class Replayer:
    def __init__(self, target: str, plan: Plan, *, store_target: str = "",
                 session_prefix: str = "", deadline_s: float = 0.0, turn_timeout_s: float = 900.0,
                 stats_interval_s: float = 0.5, end_after_s: float | None = None,
                 prepare_lead_s: float | None = None, prepare_share: float = 1.0,
                 on_record: Callable[[TurnRecord], None] | None = None):
        self.target = target
        self.plan = plan
        self.store_target = store_target
        self.session_prefix = session_prefix
        self.deadline_s = deadline_s  # 0: none; else no turn is sent after this many seconds
        self.turn_timeout_s = turn_timeout_s
        self.stats_interval_s = stats_interval_s
        # the client ends each user's sessions this long after its last answer (EndSession, as
        # DELETE /v1/sessions does); None: never, the store must guess
        self.end_after_s = end_after_s
        # the client says each continuing turn is coming this long before it sends it
        # (PrepareSession); None: never. Only the `prepare_share` of users whose clients do
        # (the simulator's draw by user id, bench/sim/prepare_hints.py).
        check_prepare(prepare_lead_s, prepare_share)
        self.prepare_lead_s = prepare_lead_s
        self.prepare_share = prepare_share
        self.on_record = on_record or (lambda r: None)

    def run(self) -> ReplayResult:
        return asyncio.run(self._main())

    async def _main(self) -> ReplayResult:
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        self.records: list[TurnRecord] = []
        self.samples: list[QueueSample] = []
        # TLS when the command configured it (bidaw replay --tls-*), else plaintext
        async with aio_channel(self.target, options=_OPTIONS) as ch:
            self._stub = scheduler_pb2_grpc.SchedulerStub(ch)
            store_ch = (aio_channel(self.store_target, options=_OPTIONS)
                        if self.store_target else None)
            self._store = kv_store_pb2_grpc.KVStoreStub(store_ch) if store_ch else None
            sampler = asyncio.create_task(self._sample())
            try:
                await asyncio.gather(*(self._user(u) for u in self.plan.users))
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
                if store_ch is not None:
                    await store_ch.close()
        return ReplayResult(self.records, self.samples, self._now())

    def _now(self) -> float:
        return asyncio.get_running_loop().time() - self._t0

    async def _sleep_until(self, t: float) -> None:
        await asyncio.sleep(max(0.0, t - self._now()))

    async def _user(self, u: UserScript) -> None:
        recs = [new_record(u, t, self.session_prefix) for t in u.turns]
        self.records.extend(recs)
        history: list[int] = []
        prev_end = 0.0
        prepares_turns = self.prepare_lead_s is not None and prepares(u.user, self.prepare_share)
        said: list[asyncio.Task] = []
        for t, rec in zip(u.turns, recs):
            if t.index > 0:
                rec.scheduled_s = prev_end + t.think_s
                rec.prev_end_s = prev_end
            if self.deadline_s and rec.scheduled_s > self.deadline_s:
                break  # never sent: no need to wait for it
            if t.index > 0 and prepares_turns and t.history_tokens > 0:
                await self._sleep_until(max(prev_end, rec.scheduled_s - self.prepare_lead_s))
                said.append(asyncio.create_task(self._prepare(rec)))
            await self._sleep_until(rec.scheduled_s)
            if self.deadline_s and self._now() > self.deadline_s:
                break
            if t.history_tokens == 0:
                history = []  # a new session (the first, or after the context filled up)
            prompt = history + query_tokens(self.plan.config.seed, u.user, t.index, t.query_len,
                                            self.plan.config.token_range)
            generated = await self._turn(rec, prompt)
            self.on_record(rec)
            if rec.status != ANSWERED:
                break
            history = prompt + generated
            prev_end = rec.end_s
        await asyncio.gather(*said)  # each records its own reply or failure
        for rec in recs:  # the rest were never sent
            if rec.status not in (ANSWERED, FAILED):
                self.on_record(rec)
        if self.end_after_s is not None and recs and recs[-1].status == ANSWERED:
            await self._sleep_until(prev_end + self.end_after_s)
            for session in dict.fromkeys(r.session for r in recs):
                await self._end(session)

    async def _end(self, session: str) -> None:
        try:
            await self._stub.EndSession(scheduler_pb2.EndSessionRequest(session_id=session),
                                        timeout=self.turn_timeout_s)
        except grpc.aio.AioRpcError as exc:  # costs hit rate, not a turn
            log.warning("ending session %s failed: %s", session, exc.code().name)

    async def _prepare(self, rec: TurnRecord) -> None:
        rec.prepared_s = self._now()
        try:
            reply = await self._stub.PrepareSession(
                scheduler_pb2.PrepareSessionRequest(session_id=rec.session),
                timeout=PREPARE_TIMEOUT_S)
            rec.prepared_tier = TIERS.get(reply.tier, "none")
        except grpc.aio.AioRpcError as exc:  # costs hit rate, not a turn
            rec.prepared_tier = "error"
            log.warning("preparing session %s failed: %s", rec.session, exc.code().name)

    async def _turn(self, rec: TurnRecord, prompt: list[int]) -> list[int]:
        if self._store is not None:
            await self._lookup(rec)
        request = common_pb2.TurnRequest(session_id=rec.session, prompt_token_ids=prompt,
                                         max_tokens=rec.answer_tokens, ignore_eos=True,
                                         temperature=0.0)
        generated: list[int] = []
        rec.sent_s = self._now()
        try:
            async for event in self._stub.SubmitTurn(request, timeout=self.turn_timeout_s):
                if event.token_ids and not generated:
                    rec.first_token_s = self._now()
                generated.extend(event.token_ids)
                if event.HasField("summary"):
                    self._fill(rec, event.summary)
            rec.status = ANSWERED
        except grpc.aio.AioRpcError as exc:
            rec.status = FAILED
            rec.error = f"{exc.code().name}: {exc.details()}"
        rec.end_s = self._now()
        if not rec.first_token_s:
            rec.first_token_s = rec.end_s
        return generated

    async def _lookup(self, rec: TurnRecord) -> None:
        try:
            reply = await self._store.Lookup(
                kv_store_pb2.LookupRequest(session_id=rec.session), timeout=10.0)
            rec.tier_at_arrival = TIERS.get(reply.tier, "none")
            rec.kv_bytes_at_arrival = reply.num_bytes
        except grpc.aio.AioRpcError:
            rec.tier_at_arrival = ""  # unknown: the report falls back to the worker's tier

    @staticmethod
    def _fill(rec: TurnRecord, s: common_pb2.TurnSummary) -> None:
        rec.prompt_tokens = s.prompt_tokens
        rec.cached_tokens = s.cached_tokens
        rec.recomputed_tokens = s.recomputed_tokens
        rec.completion_tokens = s.completion_tokens
        rec.kv_tier = TIERS.get(s.kv_tier, "none")
        rec.server_ttft_s = s.ttft_s
        rec.queue_s = s.queue_s
        rec.kv_load_s = s.kv_load_s
        rec.server_latency_s = s.latency_s
        rec.finish_reason = s.finish_reason

    async def _sample(self) -> None:
        while True:
            try:
                s = await self._stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=5.0)
                self.samples.append(QueueSample(self._now(), s.ready_queue, s.preparing_queue,
                                                s.running))
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(self.stats_interval_s)
