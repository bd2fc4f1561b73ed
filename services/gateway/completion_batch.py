"""/v1/completions with a batch of prompts (`prompt` as a list: completion_prompts.py), as vLLM
answers it: each prompt is its own turn, run concurrently (at most CONCURRENT at once), and the
response is one text_completion whose choices are indexed in the prompts' order and whose usage
is their sum. The request holds one admission slot, like any other; any prompt's failure fails
the whole request (the others are cancelled), as no partial answer can be told apart."""
from __future__ import annotations

import asyncio

from aiohttp import web

from services.gateway.errors import bad_request
from services.gateway.logprobs import PromptSteps
from services.gateway.protocol import Parsed
from services.gateway.responses import Reply
from services.gateway.turns import SESSION_HEADERS, TurnServer, session_headers, turn_request

# Turns of one request in flight at once: one worker's default batch (--max-batch 16), so a
# batch of 64 keeps a worker full without taking the whole scheduler's queue.
CONCURRENT = 16


class BatchTurns(TurnServer):
    """TurnServer's turns, several per request; each prompt's session is recognised apart."""

    async def serve_batch(self, request: web.Request, tenant: str, batch: list[Parsed],
                          model: str) -> web.Response:
        named = next((h for h in SESSION_HEADERS if request.headers.get(h)),
                     "user" if batch[0].user else None)
        if named:  # one session cannot hold several conversations at once
            raise bad_request("a batch of prompts runs each prompt as a conversation of its "
                              "own: name no session (X-Session-Id, x-user-id, user) or send one "
                              "prompt per request", named)
        gate = asyncio.Semaphore(CONCURRENT)

        async def run(parsed: Parsed):
            async with gate:
                return await self._one(tenant, parsed)

        tasks = [asyncio.ensure_future(run(parsed)) for parsed in batch]
        try:
            done = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()  # after a failure: the others' turns stop too
        replies = [Reply(False, model, p.logprobs, p.echo, p.raw_prompt, i)
                   for i, p in enumerate(batch)]
        choices = [reply.choice(text, summary, steps, prompt)
                   for reply, (_, text, summary, steps, prompt) in zip(replies, done)]
        headers = done[0][0]  # the first prompt's session, as the answer's headers name one
        return web.json_response(replies[0].complete_batch(choices, [d[2] for d in done]),
                                 headers={"x-request-id": replies[0].id, **headers})

    async def _one(self, tenant: str, parsed: Parsed):
        call = self.backend.submit(turn_request(parsed, tenant, ""))
        try:
            first = await self._first(call)
            headers = session_headers(first, tenant, "")
            prompt = PromptSteps()
            text, summary, steps = await self._collect(call, first, prompt)
            self._finished(summary)
            return headers, text, summary, steps, prompt
        finally:
            call.cancel()
