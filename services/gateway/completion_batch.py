"""Several choices in one answer, as vLLM gives them: /v1/completions with a batch of prompts
(`prompt` as a list: completion_prompts.py), and `n` > 1 (chat and completions). Each choice is
its own turn, run concurrently (at most CONCURRENT at once); the choices are indexed prompt by
prompt, n each (prompt i's j-th is i * n + j), and the usage sums the answers, with each prompt
counted once (OpenAI's n). The request holds one admission slot, like any other; any turn's
failure fails the whole request (the others are cancelled), as no partial answer can be told
apart.

The n answers of one prompt differ by their seeds: the request's (given or drawn) plus j, so a
seeded request gives the same n answers again. They run in the request's session (named, or
recognised from the history like any turn): a session's turns run one at a time, so its n
answers follow each other, each reusing the history's KV; the client's next turn, whichever
answer it keeps, reuses the KV of its longest matching prefix.
"""
from __future__ import annotations

import asyncio
import dataclasses

from aiohttp import web

from services.gateway.errors import bad_request
from services.gateway.fields import UINT64_MAX
from services.gateway.logprobs import PromptSteps
from services.gateway.protocol import Parsed
from services.gateway.responses import Reply
from services.gateway.turns import (SESSION_HEADERS, TurnServer, session_headers, session_of,
                                    turn_request)

# Turns of one request in flight at once: one worker's default batch (--max-batch 16), so a
# batch of 256 keeps a worker full without taking the whole scheduler's queue.
CONCURRENT = 16


class BatchTurns(TurnServer):
    """TurnServer's turns, several per request; each prompt's session is recognised apart."""

    async def serve_batch(self, request: web.Request, tenant: str, batch: list[Parsed],
                          model: str, chat: bool = False) -> web.Response:
        """`batch`: the prompts (one for a chat), each answered `n` times."""
        n, session = batch[0].n, ""
        if len(batch) > 1:
            named = next((h for h in SESSION_HEADERS if request.headers.get(h)),
                         "user" if batch[0].user else None)
            if named:  # one session cannot hold several conversations at once
                raise bad_request("a batch of prompts runs each prompt as a conversation of "
                                  "its own: name no session (X-Session-Id, x-user-id, user) or "
                                  "send one prompt per request", named)
        else:
            session, _ = session_of(request, batch[0], self.max_session_id)
        turns = [dataclasses.replace(p, seed=(p.seed + j) % (UINT64_MAX + 1))
                 for p in batch for j in range(n)]
        gate = asyncio.Semaphore(CONCURRENT)

        async def run(parsed: Parsed):
            async with gate:
                return await self._one(tenant, parsed, session)

        tasks = [asyncio.ensure_future(run(parsed)) for parsed in turns]
        try:
            done = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()  # after a failure: the others' turns stop too
        replies = [Reply(chat, model, p.logprobs, p.echo, p.raw_prompt, i)
                   for i, p in enumerate(turns)]
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
            self._finished(summary)
            return headers, text, summary, steps, prompt
        finally:
            call.cancel()
