"""OpenAI's Responses API: POST /v1/responses (plain or streamed), GET and DELETE
/v1/responses/{id}, GET /v1/responses/{id}/input_items.

A response is one chat turn through the gateway's own path (auth, tenant limits, FIFO
admission, the prompt bound: Gateway._turn). With `previous_response_id` the client sends only
its new input: the gateway rebuilds the conversation from the stored responses, which the
scheduler keeps for every gateway replica (scheduler/response_store.py), and sends it whole,
without a session id, so the scheduler recognises the conversation by its content and reuses
its KV as for any client that resends its history
(`usage.input_tokens_details.cached_tokens` says how much). A branch (two responses after the
same one) is recognised as a branch. An X-Session-Id header names the session, as on chat.
"""
from __future__ import annotations

import asyncio
import json
import logging

import grpc
from aiohttp import web

from services.runtime import metrics

from services.gateway.errors import ApiError, from_grpc
from services.gateway.protocol import check_model
from services.gateway.response_objects import ResponseReply, input_items
from services.gateway.responses_input import (ResponseAsk, parse_response_request, stored,
                                              with_history)
from services.gateway.turns import TurnServer

log = logging.getLogger("bidaw.gateway")
MAX_LIST = 100


def _sse(event: dict) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n" \
        .encode()


class ResponseTurns(TurnServer):
    """TurnServer's session, tracing and cancellation, with the Responses API's shapes; a
    finished response is stored when the client asked it to be (`store`, the default)."""

    async def _finish(self, reply: ResponseReply, text: str, summary, steps,
                      request=None) -> dict:
        """The finished response object, kept by the scheduler before the client hears of it
        (so that its next request may follow it at once; shielded: a client that hangs up
        now knows the id from the stream's first event, and may follow it later)."""
        self._finished(summary, request)
        body = reply.response(text, summary, steps)
        if reply.ask.store:
            try:
                await asyncio.shield(self.backend.put_response(stored(
                    reply.ask, reply.id, text, body, input_items(reply.ask))))
            except grpc.RpcError as exc:  # the answer stands; following it will be a 404
                log.warning("response %s not stored: %s", reply.id, exc.code().name)
        return body

    async def _whole(self, call, first, reply: ResponseReply, headers: dict) -> web.Response:
        text, summary, steps = await self._collect(call, first)
        body = await self._finish(reply, text, summary, steps)
        return web.json_response(body, headers={"x-request-id": reply.id, **headers})

    async def _stream(self, request, call, first, parsed, reply: ResponseReply,
                      headers: dict) -> web.StreamResponse:
        response = await self._open_stream(request, reply.id, headers)
        text, steps, held = [], [], []  # held: logprobs of a partial character's tokens
        try:
            for event in reply.opening():
                await response.write(_sse(event))
            async for event in self._events(call, first):
                steps.extend(event.logprobs)
                held.extend(event.logprobs)
                if event.text:
                    text.append(event.text)
                    await response.write(_sse(reply.delta(event.text, held)))
                    held = []
                if event.HasField("summary"):
                    body = await self._finish(reply, "".join(text), event.summary,
                                              steps, request)
                    for closing in reply.closing("".join(text), event.summary, body):
                        await response.write(_sse(closing))
        except grpc.RpcError as exc:  # headers are gone: report in-band, as OpenAI does
            metrics.TURNS.labels("error").inc()
            error = from_grpc(exc, self.retry_after)
            await response.write(_sse(reply.event("error", code=error.code,
                                                  message=error.message, param=error.param)))
        except (ConnectionResetError, ConnectionError):
            self._hung_up(request)
            return response
        await response.write_eof()
        return response


class ResponsesApi:
    def __init__(self, gateway):
        self.gateway = gateway
        config = gateway.config
        self.turns = ResponseTurns(gateway.backend, config.retry_after_s, config.max_session_id)

    def routes(self) -> list:
        return [web.post("/v1/responses", self.create),
                web.get("/v1/responses/{id}", self.retrieve),
                web.delete("/v1/responses/{id}", self.delete),
                web.get("/v1/responses/{id}/input_items", self.list_input)]

    async def _prepare(self, request: web.Request, tenant: str, body: dict):
        config = self.gateway.config
        model = check_model(body, config.served_model_name)
        ask: ResponseAsk = parse_response_request(body, config, tenant)
        found = (await self._call(self.gateway.backend.get_response(tenant, ask.previous_id,
                                                                    chain=True))
                 if ask.previous_id else None)
        with_history(ask, found, config)
        reply = ResponseReply(ask, model, ask.parsed.temperature, ask.parsed.top_p)
        return lambda: self.turns.serve(request, tenant, ask.parsed, reply)

    async def _call(self, pending):
        try:
            return await pending
        except grpc.RpcError as exc:
            raise from_grpc(exc, self.gateway.config.retry_after_s) from None

    async def create(self, request: web.Request) -> web.StreamResponse:
        return await self.gateway._turn(request, self._prepare)

    async def _stored(self, request: web.Request):
        """(tenant, the stored response) named by the path; 404 if it is not kept."""
        tenant = self.gateway._tenant(request)
        response_id = request.match_info["id"]
        found = await self._call(self.gateway.backend.get_response(tenant, response_id))
        if not found.responses:
            raise ApiError(404, f"Response with id '{response_id[:80]}' not found.", None,
                           "not_found")
        return tenant, found.responses[0]

    async def retrieve(self, request: web.Request) -> web.Response:
        record = (await self._stored(request))[1]
        return web.Response(body=record.body, content_type="application/json")

    async def delete(self, request: web.Request) -> web.Response:
        tenant, record = await self._stored(request)
        await self._call(self.gateway.backend.delete_response(tenant, record.id))
        return web.json_response({"id": record.id, "object": "response", "deleted": True})

    async def list_input(self, request: web.Request) -> web.Response:
        items = json.loads((await self._stored(request))[1].input_items)
        order = request.query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ApiError(400, "'order' must be asc or desc", "order", "invalid_value")
        limit = request.query.get("limit", "20")
        if not (limit.isascii() and limit.isdigit() and len(limit) <= 6
                and 1 <= int(limit) <= MAX_LIST):  # (the length first: int() of 5,000 digits)
            raise ApiError(400, f"'limit' must be an integer in [1, {MAX_LIST}]", "limit",
                           "invalid_value")
        if order == "desc":
            items.reverse()
        after = request.query.get("after")
        if after:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        page = items[:int(limit)]
        return web.json_response({"object": "list", "data": page,
                                  "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None,
                                  "has_more": len(items) > len(page)})
