"""Serving one chat or completion turn: plain JSON or server-sent events (SSE)."""
from __future__ import annotations

import json
import logging

import grpc
from aiohttp import web

from services.runtime import metrics

from services.runtime import tracing
from services.runtime.gen import common_pb2

from services.gateway import turn_note
from services.gateway.auth import scoped_session
from services.gateway.backend import Backend
from services.gateway.errors import ApiError, bad_request, from_grpc
from services.gateway.logprobs import PromptSteps
from services.gateway.protocol import Parsed
from services.gateway.responses import LiveUsage, Reply, usage
from services.gateway.session_ids import from_header, to_header

log = logging.getLogger("bidaw.gateway")
SESSION_HEADER = "X-Session-Id"
# request key: the turn's summary came, so a client that hangs up now (after the last chunk,
# before [DONE] or the stream's end) cancelled nothing: logged 200, counted ok only
ANSWERED = getattr(web, "RequestKey", lambda name, kind: name)("bidaw_answered", bool)


def session_of(request: web.Request, parsed: Parsed, limit: int) -> tuple[str, bool]:
    """The conversation the client names (X-Session-Id, percent-decoded: session_ids.py; else
    the body's `conversation_id`, vLLM's multi-turn proxy's), or "" when it names none (the
    scheduler then recognises the conversation from its messages); and whether it named one.
    A user's id (OpenAI's `user`, LMCache's `x-user-id`) names no conversation: one user may
    hold several, and one session for all of them would overwrite each one's KV with the
    other's at every turn."""
    if request.headers.get(SESSION_HEADER):
        session = from_header(request.headers[SESSION_HEADER], SESSION_HEADER)
        source = SESSION_HEADER
    else:
        session, source = parsed.conversation_id, "conversation_id"
    if not session:
        return "", False
    check_session_id(session, limit, source, f"the session id ({source})")
    return session, True


def check_session_id(session: str, limit: int, param: str, what: str = "the session id") -> None:
    """400 naming `param` unless `session` is printable and at most `limit` bytes."""
    if len(session.encode()) > limit or not session.isprintable():
        raise bad_request(f"{what} must be printable and at most {limit} bytes", param)


def chat_messages(parsed: Parsed) -> list[common_pb2.ChatMessage]:
    names = parsed.names or [""] * len(parsed.messages)
    return [common_pb2.ChatMessage(role=r, content=c, name=n)
            for (r, c), n in zip(parsed.messages, names)]


def turn_request(parsed: Parsed, tenant: str, session: str) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(
        session_id=scoped_session(tenant, session) if session else "", tenant=tenant,
        messages=chat_messages(parsed), prompt_token_ids=parsed.prompt_token_ids,
        max_tokens=parsed.max_tokens, min_tokens=parsed.min_tokens,
        chat_template_kwargs=parsed.template_kwargs,
        temperature=parsed.temperature, ignore_eos=parsed.ignore_eos, stop=parsed.stop,
        seed=parsed.seed,
        raw_prompt=parsed.raw_prompt, cache_salt=parsed.cache_salt,
        json_object=parsed.json_object,
        top_p=parsed.top_p,
        top_k=parsed.top_k,
        presence_penalty=parsed.presence_penalty,
        frequency_penalty=parsed.frequency_penalty,
        logit_bias=parsed.logit_bias,
        repetition_penalty=parsed.repetition_penalty,
        min_p=parsed.min_p,
        logprobs=parsed.logprobs,
        top_logprobs=parsed.top_logprobs,
        prompt_logprobs=parsed.prompt_logprobs,
        prompt_only=parsed.prompt_only,
        continue_final_message=parsed.continue_final_message,
        no_generation_prompt=parsed.no_generation_prompt,
        **({} if parsed.add_special_tokens is None
           else {"add_special_tokens": parsed.add_special_tokens}))


def session_headers(first: common_pb2.TurnEvent, tenant: str, session: str) -> dict:
    """x-bidaw-session (the session the turn ran in, without the tenant's prefix) and
    x-bidaw-session-recognised (id, content, revised, branch or new), from the scheduler's
    first event; counted in the gateway's metrics too."""
    recognised = first.recognised or ("id" if session else "new")
    scoped = first.session_id or scoped_session(tenant, session)
    prefix = scoped_session(tenant, "")
    named = scoped[len(prefix):] if scoped.startswith(prefix) else scoped
    metrics.RECOGNISED.labels(recognised).inc()
    tracing.set_attributes(session=named, session_recognised=recognised)
    turn_note.found(recognised, scoped)
    return {"x-bidaw-session": to_header(named), "x-bidaw-session-recognised": recognised}


def sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class TurnServer:
    def __init__(self, backend: Backend, retry_after: int, max_session_id: int):
        self.backend = backend
        self.retry_after = retry_after
        self.max_session_id = max_session_id

    async def serve(self, request: web.Request, tenant: str, parsed: Parsed,
                    reply: Reply) -> web.StreamResponse:
        session, named = session_of(request, parsed, self.max_session_id)
        tracing.set_attributes(tenant=tenant, session=session, session_named=named,
                               stream=parsed.stream, max_tokens=parsed.max_tokens,
                               messages=len(parsed.messages) or None)
        call = self.backend.submit(turn_request(parsed, tenant, session))
        reply.sglext = parsed.cached_details
        try:
            first = await self._first(call)
            headers = session_headers(first, tenant, session)
            if parsed.stream:
                return await self._stream(request, call, first, parsed, reply, headers)
            return await self._whole(call, first, reply, headers)
        finally:
            call.cancel()  # a no-op once the stream ended; frees the worker if we left early

    async def _first(self, call) -> common_pb2.TurnEvent:
        """The first event, before any byte is sent, so that a refused turn gets its status."""
        try:
            return await call.__anext__()
        except grpc.RpcError as exc:
            metrics.TURNS.labels("rejected").inc()
            raise from_grpc(exc, self.retry_after) from None
        except StopAsyncIteration:
            raise ApiError(500, "the scheduler ended the turn without an answer") from None

    async def _events(self, call, first):
        yield first
        async for event in call:
            yield event

    async def _collect(self, call, first, prompt: PromptSteps | None = None
                       ) -> tuple[str, common_pb2.TurnSummary, list]:
        """The whole answer: its text, its summary and its tokens' logprobs; the prompt's
        logprobs, when the turn asked, go to `prompt`."""
        text, summary, steps = [], None, []
        try:
            async for event in self._events(call, first):
                if prompt is not None and event.prompt_logprobs:
                    prompt.add(event)
                text.append(event.text)
                steps.extend(event.logprobs)
                if event.HasField("summary"):
                    summary = event.summary
        except grpc.RpcError as exc:
            metrics.TURNS.labels("error").inc()
            raise from_grpc(exc, self.retry_after) from None
        if summary is None:
            raise ApiError(500, "the turn ended without a summary")
        return "".join(text), summary, steps

    async def _whole(self, call, first, reply: Reply, headers: dict) -> web.Response:
        prompt = PromptSteps()
        text, summary, steps = await self._collect(call, first, prompt)
        self._finished(summary, None)
        return web.json_response(reply.complete(text, summary, steps, prompt),
                                 headers={"x-request-id": reply.id, **headers})

    @staticmethod
    async def _open_stream(request, request_id: str, headers: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
            "x-request-id": request_id, **headers})
        await response.prepare(request)
        return response

    async def _chunks(self, request, call, first, reply: Reply, done: list,
                      live: bool = False):
        """One choice's chunks, in order; its summary is appended to `done` at its end.
        `live`: each chunk carries the usage so far (vLLM's continuous_usage_stats)."""
        counted = LiveUsage(first) if live else None
        if reply.chat:
            yield reply.first_chunk(counted and counted.now())
        steps = []  # logprobs of tokens whose text is still held back (a partial character)
        prompt = PromptSteps()  # an echoed prompt's, sent as the first chunk (vLLM's order)
        async for event in self._events(call, first):
            if event.prompt_logprobs:
                if prompt is not None:  # (None: a re-run's, the same, after the echo)
                    prompt.add(event)
                continue
            if prompt is not None and reply.echo:
                yield reply.echo_chunk(prompt)
            prompt = None
            steps.extend(event.logprobs)
            if counted:
                counted.add(event)
            if event.text:
                yield reply.chunk(event.text, steps=steps, live=counted and counted.now())
                steps = []
            if event.HasField("summary"):
                self._finished(event.summary, request)
                done.append(event.summary)
                yield reply.chunk("", event.summary.finish_reason or "stop", steps,
                                  counted and usage(event.summary))

    async def _stream(self, request, call, first, parsed: Parsed, reply: Reply,
                      headers: dict) -> web.StreamResponse:
        response = await self._open_stream(request, reply.id, headers)

        async def chunks():
            done = []
            async for chunk in self._chunks(request, call, first, reply, done,
                                            parsed.continuous_usage):
                yield chunk
            if reply.sglext and done:
                yield reply.sglext_chunk(done[0])
            if parsed.include_usage and done:
                yield reply.usage_chunk(done)
        return await self._streamed(request, response, chunks())

    async def _streamed(self, request, response: web.StreamResponse,
                        chunks) -> web.StreamResponse:
        """`chunks` (dicts, as they come) written as SSE, then [DONE]. The headers are gone:
        a failure is reported in-band, as vLLM does; a client gone ends it quietly."""
        try:
            async for chunk in chunks:
                await response.write(sse(chunk))
        except (ApiError, grpc.RpcError) as exc:
            metrics.TURNS.labels("error").inc()
            error = exc if isinstance(exc, ApiError) else from_grpc(exc, self.retry_after)
            await response.write(sse(error.body()))
        except (ConnectionResetError, ConnectionError):
            self._hung_up(request)
            return response
        await response.write(sse("[DONE]"))
        await response.write_eof()
        return response

    @staticmethod
    def _hung_up(request) -> None:
        """The client closed a stream: a cancelled turn unless its summary had come."""
        if not request.get(ANSWERED):
            metrics.TURNS.labels("cancelled").inc()
            log.info("client went away mid-stream")

    @staticmethod
    def _finished(summary, request) -> None:
        """The turn's summary came (`request`: a stream's, marked ANSWERED)."""
        if request is not None:
            request[ANSWERED] = True
        metrics.observe_turn(summary)
        turn_note.finished(summary)
        tracing.set_attributes(prompt_tokens=summary.prompt_tokens,
                               cached_tokens=summary.cached_tokens,
                               completion_tokens=summary.completion_tokens,
                               kv_tier=metrics.TIER_LABELS.get(summary.kv_tier, "none"),
                               ttft_s=summary.ttft_s, queue_s=summary.queue_s,
                               finish_reason=summary.finish_reason)
