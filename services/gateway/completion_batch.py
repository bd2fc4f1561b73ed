"""Several choices in one answer, as vLLM gives them: /v1/completions with a batch of prompts
(`prompt` as a list: completion_prompts.py), and `n` > 1 (chat and completions). Each choice is
its own turn, run concurrently (at most `width` at once: CONCURRENT, or fewer where the
gateway's limits are lower); the choices are indexed prompt by prompt, n each (prompt i's j-th
is i * n + j), and the usage sums the answers, with each prompt counted once (OpenAI's n). The
request holds `width` admission slots and counts `width` turns against its tenant's in-flight
limit, as that many single requests would; its rate limit counts it once (a request, as
OpenAI's requests per minute). Any turn's failure fails the whole request (the others are
cancelled), as no partial answer can be told apart.

The n answers of one prompt differ by their seeds: the request's (given or drawn) plus j, so a
seeded request gives the same n answers again. They run in the request's session (named, or
recognised from the history like any turn): a session's turns run one at a time, so its n
answers follow each other, each reusing the history's KV; the client's next turn, whichever
answer it keeps, reuses the KV of its longest matching prefix.
"""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Awaitable, Callable

from aiohttp import web

from services.gateway.errors import bad_request
from services.gateway.fields import UINT64_MAX
from services.gateway.logprobs import PromptSteps
from services.gateway.protocol import Parsed
from services.gateway.responses import Reply
from services.gateway.turns import (SESSION_HEADER, TurnServer, session_headers, session_of,
                                    turn_request)

# Turns of one request in flight at once: one worker's default batch (--max-batch 16), so a
# batch of 256 keeps a worker full without taking the whole scheduler's queue.
CONCURRENT = 16


@dataclass(frozen=True)
class Batch:
    """What a route hands the gateway for a request of several turns: `run(width)` answers
    it, at most `width` turns at once (the slots the gateway gave it)."""
    turns: int
    run: Callable[[int], Awaitable[web.StreamResponse]]

    def width(self, slots: int, tenant_limit: int) -> int:
        """Its turns at once: never more than all the slots, nor than one tenant may hold."""
        return min(self.turns, CONCURRENT, slots, tenant_limit or self.turns)


class BatchTurns(TurnServer):
    """TurnServer's turns, several per request; each prompt's session is recognised apart."""

    def batch(self, request: web.Request, tenant: str, batch: list[Parsed], model: str,
              chat: bool = False) -> Batch:
        return Batch(len(batch) * batch[0].n,
                     lambda width: self.serve_batch(request, tenant, batch, model, chat, width))

    async def serve_batch(self, request: web.Request, tenant: str, batch: list[Parsed],
                          model: str, chat: bool = False,
                          width: int = CONCURRENT) -> web.Response:
        """`batch`: the prompts (one for a chat), each answered `n` times, `width` at once."""
        n, session = batch[0].n, ""
        if len(batch) > 1:
            named = (SESSION_HEADER if request.headers.get(SESSION_HEADER) else
                     "conversation_id" if batch[0].conversation_id else None)
            if named:  # one session cannot hold several conversations at once
                raise bad_request("a batch of prompts runs each prompt as a conversation of "
                                  "its own: name no session (X-Session-Id, conversation_id) or "
                                  "send one prompt per request", named)
        else:
            session, _ = session_of(request, batch[0], self.max_session_id)
        turns = [dataclasses.replace(p, seed=(p.seed + j) % (UINT64_MAX + 1))
                 for p in batch for j in range(n)]
        replies = [Reply(chat, model, p.logprobs, p.echo, p.raw_prompt, i)
                   for i, p in enumerate(turns)]
        for reply in replies[1:]:  # one answer: one id and time
            reply.id, reply.created = replies[0].id, replies[0].created
        replies[0].sglext = batch[0].cached_details
        if batch[0].stream:
            return await self._stream_choices(request, tenant, session, turns, replies, n,
                                              width)
        gate = asyncio.Semaphore(width)

        async def run(parsed: Parsed):
            async with gate:
                return await self._one(tenant, parsed, session)

        tasks = [asyncio.ensure_future(run(parsed)) for parsed in turns]
        try:
            done = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()  # after a failure: the others' turns stop too
        choices = [reply.choice(text, summary, steps, prompt)
                   for reply, (_, text, summary, steps, prompt) in zip(replies, done)]
        headers = done[0][0]  # the first turn's session, as the answer's headers name one
        summaries = [d[2] for d in done]
        return web.json_response(replies[0].complete_batch(choices, summaries, summaries[::n]),
                                 headers={"x-request-id": replies[0].id, **headers})

    async def _one(self, tenant: str, parsed: Parsed, session: str):
        call = self.backend.submit(turn_request(parsed, tenant, session))
        try:
            first = await self._first(call)
            headers = session_headers(first, tenant, session)
            prompt = PromptSteps()
            text, summary, steps = await self._collect(call, first, prompt)
            self._finished(summary, None)
            return headers, text, summary, steps, prompt
        finally:
            call.cancel()

    async def _stream_choices(self, request: web.Request, tenant: str, session: str,
                              turns: list[Parsed], replies: list[Reply], n: int,
                              width: int) -> web.StreamResponse:
        """The choices' chunks interleaved as they come, each naming its index (vLLM's and
        OpenAI's stream). The headers wait for the first choice's first event, so a turn
        refused before it is an HTTP error; a failure after them is reported in-band."""
        gate, chunks = asyncio.Semaphore(width), asyncio.Queue()
        opened = asyncio.get_running_loop().create_future()
        done: list[list] = [[] for _ in turns]

        async def run(i: int):
            async with gate:
                call = self.backend.submit(turn_request(turns[i], tenant, session))
                try:
                    first = await self._first(call)
                    if i == 0:
                        opened.set_result(session_headers(first, tenant, session))
                    async for chunk in self._chunks(request, call, first, replies[i], done[i],
                                                    turns[i].continuous_usage):
                        await chunks.put(chunk)
                finally:
                    call.cancel()

        tasks = [asyncio.ensure_future(run(i)) for i in range(len(turns))]
        ended = asyncio.gather(*tasks)  # its error: the first choice's that failed
        try:
            await asyncio.wait([opened, ended], return_when=asyncio.FIRST_COMPLETED)
            if not opened.done():
                ended.result()  # refused before the first choice began: the HTTP error
            response = await self._open_stream(request, replies[0].id, opened.result())

            async def all_chunks():
                async for chunk in self._merged(chunks, ended):
                    yield chunk
                if replies[0].sglext and done[0]:
                    yield replies[0].sglext_chunk(done[0][0])
                if turns[0].include_usage:
                    summaries = [d[0] for d in done]
                    yield replies[0].usage_chunk(summaries, summaries[::n])
            return await self._streamed(request, response, all_chunks())
        finally:
            for task in tasks:
                task.cancel()  # after a failure or a client gone: the others' turns stop too
            ended.cancel()
            if ended.done() and not ended.cancelled():
                ended.exception()  # (read: no "never retrieved" warning)

    @staticmethod
    async def _merged(chunks: asyncio.Queue, ended):
        """Every chunk the choices put, until all have ended (raises what one failed with)."""
        while True:
            got = asyncio.ensure_future(chunks.get())
            await asyncio.wait([got, ended], return_when=asyncio.FIRST_COMPLETED)
            if not got.done():
                got.cancel()
                while not chunks.empty():
                    yield chunks.get_nowait()
                ended.result()
                return
            yield got.result()
