"""The client side of `bidaw load`: N chat sessions on one event loop, each a multi-turn
conversation against the gateway's /v1/chat/completions (streamed, greedy, ignore_eos).

A session sends its whole history every turn, waits a seeded think time after each answer, and
after `turns_per_session` turns starts a new conversation (so the KV a conversation needs stays
bounded while the number of conversations grows). A 429 or 503 that carries Retry-After is
deliberate shedding: the same turn is retried after Retry-After (times 1-2, so retries spread
out). No turn is sent after `duration_s`; turns already sent are awaited to their end.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
from dataclasses import dataclass

import aiohttp

from bench.load.messages import user_message
from bench.load.records import ERROR, MALFORMED, OK, SHED_429, SHED_503, UNANSWERED, Attempt


@dataclass
class LoadPlan:
    url: str                      # the OpenAI base URL, e.g. http://127.0.0.1:8000/v1
    sessions: int = 200
    duration_s: float = 600.0
    max_tokens: int = 16
    think_s: tuple[float, float] = (1.0, 5.0)
    turns_per_session: int = 8
    seed: int = 0
    turn_timeout_s: float = 300.0  # a turn not finished by then counts as failed
    api_key: str = ""
    model: str = ""               # empty: the gateway's served model


def classify(status: int, retry_after: str | None, body: bytes) -> tuple[str, str]:
    """The outcome of a refused request and why: shedding only if it says when to come back
    and has the gateway's JSON error body; anything else is an error."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    message = str(error.get("message", "")) if isinstance(error, dict) else ""
    if status in (429, 503) and retry_after and isinstance(error, dict):
        # who shed, with counts blanked so equal reasons add up ("N requests in flight")
        return (SHED_429 if status == 429 else SHED_503), re.sub(r"\d+", "N", message)[:80]
    return ERROR, f"HTTP {status}: {message}"[:200]


class Driver:
    def __init__(self, plan: LoadPlan):
        self.plan = plan
        self.attempts: list[Attempt] = []

    def run(self) -> list[Attempt]:
        # A private loop rather than asyncio.run, which leaves the calling thread with no
        # current loop: code that later builds grpc.aio channels there would fail (tests do).
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(self.main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def main(self) -> list[Attempt]:
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        connector = aiohttp.TCPConnector(limit=self.plan.sessions + 8)
        timeout = aiohttp.ClientTimeout(total=self.plan.turn_timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            self._http = http
            await asyncio.gather(*(self._client(i) for i in range(self.plan.sessions)))
        return self.attempts

    def now(self) -> float:
        return asyncio.get_running_loop().time() - self._t0

    def _over(self) -> bool:
        return self.now() >= self.plan.duration_s

    async def _client(self, index: int) -> None:
        """One user: conversation after conversation until the duration is over."""
        rng = random.Random(f"{self.plan.seed}/client/{index}")
        await asyncio.sleep(rng.uniform(0.0, self.plan.think_s[1]))  # users do not all start at 0
        conversation = 0
        while not self._over():
            session = f"load-{self.plan.seed}-{index}-{conversation}"
            conversation += 1
            history: list[dict] = []
            for turn in range(self.plan.turns_per_session):
                history.append({"role": "user",
                                "content": user_message(self.plan.seed, session, turn)})
                answer = await self._turn(session, turn, history, rng)
                if answer is not None:
                    history.append({"role": "assistant", "content": answer})
                # after a failure too: a user pauses, then starts afresh (and a dead gateway
                # is not hammered in a tight loop)
                await asyncio.sleep(rng.uniform(*self.plan.think_s))
                if answer is None or self._over():
                    break

    async def _turn(self, session: str, turn: int, history: list[dict],
                    rng: random.Random) -> str | None:
        """Send one turn until it is answered (retrying after shedding); its answer, or None."""
        for attempt in itertools.count():
            if self._over():
                return None
            rec = Attempt(session=session, turn=turn, attempt=attempt, sent_s=self.now())
            self.attempts.append(rec)
            try:
                answer = await self._send(rec, session, history)
            finally:
                rec.end_s = self.now()
            if rec.outcome == OK:
                return answer
            if rec.outcome not in (SHED_429, SHED_503):
                return None
            await asyncio.sleep(max(rec.retry_after, 0.1) * (1.0 + rng.random()))
        return None

    def _request(self, session: str, history: list[dict]) -> tuple[dict, dict]:
        body = {"messages": history, "max_tokens": self.plan.max_tokens, "temperature": 0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        if self.plan.model:
            body["model"] = self.plan.model
        headers = {"X-Session-Id": session}
        if self.plan.api_key:
            headers["Authorization"] = f"Bearer {self.plan.api_key}"
        return body, headers

    async def _send(self, rec: Attempt, session: str, history: list[dict]) -> str | None:
        body, headers = self._request(session, history)
        accepted = False
        try:
            async with self._http.post(f"{self.plan.url}/chat/completions", json=body,
                                       headers=headers) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    retry_after = resp.headers.get("Retry-After")
                    rec.outcome, rec.error = classify(resp.status, retry_after,
                                                      await resp.read())
                    rec.retry_after = float(retry_after) if retry_after else 0.0
                    return None
                accepted = True
                rec.first_s = self.now()
                return await self._read_stream(rec, resp)
        except (asyncio.TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            rec.outcome = UNANSWERED if accepted else ERROR
            rec.error = f"{type(exc).__name__}: {exc}"[:200]
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not OpenAI's shape
            rec.outcome = MALFORMED if accepted else ERROR
            rec.error = f"malformed reply: {type(exc).__name__}: {exc}"[:200]
            return None

    async def _read_stream(self, rec: Attempt, resp) -> str | None:
        """Read the SSE answer; OK only with [DONE], the usage chunk and exactly max_tokens
        tokens ending for `length` (ignore_eos: the model may not stop early)."""
        text, done, usage = [], False, None
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                rec.outcome, rec.error = UNANSWERED, str(chunk["error"].get("message"))[:200]
                return None
            for choice in chunk.get("choices") or ():
                text.append((choice.get("delta") or {}).get("content") or "")
                rec.finish_reason = choice.get("finish_reason") or rec.finish_reason
            usage = chunk.get("usage") or usage
        if not done or usage is None:
            rec.outcome, rec.error = UNANSWERED, "the stream ended without [DONE] and usage"
            return None
        rec.prompt_tokens = usage["prompt_tokens"]
        rec.completion_tokens = usage["completion_tokens"]
        rec.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        if rec.completion_tokens != self.plan.max_tokens or rec.finish_reason != "length":
            rec.outcome = MALFORMED
            rec.error = (f"{rec.completion_tokens} tokens, finish {rec.finish_reason!r}; "
                         f"asked {self.plan.max_tokens}")
            return None
        rec.outcome = OK
        return "".join(text)
