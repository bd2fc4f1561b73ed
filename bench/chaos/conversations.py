"""A short live replay of real conversations that survives faults: the users, rounds, query and
answer lengths and think times of the paper's public trace (through bench/replay's planner and
its seeded query tokens), one thread per user, greedy decoding with fixed answer lengths. Unlike
the benchmark replayer a client here retries a failed turn (a killed scheduler, a refused turn)
as a real client would, and keeps every answer for the recompute check."""
from __future__ import annotations

import math
import pathlib
import threading
import time
from dataclasses import dataclass, field

import grpc

from bench.replay.plan import Plan, PlanConfig, make_plan
from bench.replay.tokens import query_tokens
from bench.traces import load_trace
from services.client.chat_client import ChatClient

TRACE = (pathlib.Path(__file__).resolve().parents[3] / "shared" / "traces"
         / "bidaw_sample.txt")
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
             grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED,
             grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.ABORTED}


@dataclass
class Answered:
    session: str
    prompt: list[int]
    answer: list[int]
    max_tokens: int
    attempts: int
    cached_tokens: int


@dataclass
class ReplayLog:
    answered: list[Answered] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retries: int = 0
    conversations: dict[str, list[int]] = field(default_factory=dict)  # session -> its tokens
    done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def plan_for(turns: int, seed: int = 0, trace: str | None = None) -> Plan:
    """About `turns` turns: users of the trace's busiest hour with their first rounds, answers cut
    to 8 tokens and conversations to 224 tokens so a 2-core machine replays them in seconds."""
    rounds = 4
    users = max(2, min(16, math.ceil(turns / 2)))
    path = pathlib.Path(trace or TRACE)
    if path.exists():
        turns_in = load_trace(str(path), "bidaw")
    else:  # no checkout of ../shared: the generator with the public trace's statistics
        from bench.traces import SynthConfig, synthesize
        turns_in = synthesize(SynthConfig(seed=seed))
    plan = make_plan(turns_in, PlanConfig(
        window_s=3600.0, users=users, max_rounds=rounds, time_scale=0.01, max_context=224,
        max_answer=8, seed=seed))
    kept, left = [], turns  # trim to exactly `turns`
    for u in plan.users:
        if left <= 0:
            break
        kept.append(type(u)(u.user, u.start_s, u.turns[:left]))
        left -= len(kept[-1].turns)
    return Plan(plan.config, plan.window, tuple(kept), plan.users_in_window,
                plan.turns_in_window)


class Replay:
    def __init__(self, target: str, plan: Plan, prefix: str, retry_window_s: float = 180.0,
                 max_think_s: float = 1.0):
        self.target, self.plan, self.prefix = target, plan, prefix
        self.retry_window_s, self.max_think_s = retry_window_s, max_think_s
        self.log = ReplayLog()
        self._threads: list[threading.Thread] = []

    @property
    def turns(self) -> int:
        return self.plan.turns

    def start(self) -> "Replay":
        for u in self.plan.users:
            t = threading.Thread(target=self._user, args=(u,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def join(self, timeout: float = 900.0) -> ReplayLog:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            self.log.errors.append("replay did not finish in time (a hang)")
        return self.log

    def wait_done(self, n: int, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while self.log.done < n and time.monotonic() < deadline and \
                any(t.is_alive() for t in self._threads):
            time.sleep(0.05)

    def _user(self, u) -> None:
        client = ChatClient(self.target, timeout=120.0)
        time.sleep(min(u.start_s, 2.0))
        history: list[int] = []
        for t in u.turns:
            if t.index > 0:
                time.sleep(min(t.think_s, self.max_think_s))
            if t.history_tokens == 0:
                history = []
            prompt = history + query_tokens(self.plan.config.seed, u.user, t.index, t.query_len)
            session = self.prefix + t.session
            got = self._turn(client, session, prompt, t.answer_len)
            with self.log.lock:
                self.log.done += 1
            if got is None:
                break  # the conversation cannot continue as scripted
            history = prompt + got.answer
            with self.log.lock:
                self.log.answered.append(got)
                self.log.conversations[session] = history
        client.close()

    def _turn(self, client: ChatClient, session: str, prompt: list[int],
              max_tokens: int) -> Answered | None:
        start, attempt, backoff = time.monotonic(), 0, 0.2
        while True:
            attempt += 1
            try:
                r = client.turn(session, prompt_token_ids=prompt, max_tokens=max_tokens,
                                ignore_eos=True)
                return Answered(session, prompt, r.token_ids, max_tokens, attempt,
                                r.summary.cached_tokens)
            except grpc.RpcError as exc:
                code = exc.code()
                if code not in RETRYABLE or time.monotonic() - start > self.retry_window_s:
                    with self.log.lock:
                        self.log.errors.append(f"{session}: {code.name}: {exc.details()}")
                    return None
                with self.log.lock:
                    self.log.retries += 1
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
