"""/v1/sessions/{session}: a client ends a conversation (DELETE), or says its next turn is coming
(POST .../prepare); and a benchmark ends all of its tenant's (SGLang's POST /flush_cache,
vLLM's POST /reset_prefix_cache) before it measures.

The id is the one a turn's `x-bidaw-session` header named (the client's own X-Session-Id, or
the id the scheduler gave a conversation it recognised; percent-decoded as that header is),
inside the caller's tenant: one tenant can never end or warm another's. DELETE: the scheduler
waits for a turn of the session that is running, then forgets the conversation and tells the
store shard to free its KV from DRAM and SSD; the answer is OpenAI's deletion object. Prepare:
the scheduler asks the store shard to promote the KV from SSD to DRAM and answers at once,
before the load ends (a chat front end may send it at every typing start). An id nothing
knows (never seen, or ended already) is a 404. A flush: every conversation of the caller's
tenant ends as by DELETE, never another tenant's; those with a turn running are kept, and then
the answer is 409, as SGLang answers a flush it could not do, so a client never measures a
cache it believes cold.
"""
from __future__ import annotations

import grpc
from aiohttp import web

from services.gateway.auth import scoped_session
from services.gateway.errors import ApiError, from_grpc
from services.gateway.session_ids import from_header
from services.gateway.turns import check_session_id
from services.runtime.gen import common_pb2

KV_TIERS = {common_pb2.TIER_DRAM: "dram", common_pb2.TIER_LOADING: "loading"}
TIMEOUTS = {"end": "a turn of this session is still running; retry once it has finished",
            "prepare": "the scheduler did not answer in time; retry later",
            "flush": "the scheduler did not answer in time; retry later"}


class SessionsApi:
    def __init__(self, gateway):
        self.gateway = gateway

    def routes(self) -> list:
        return [web.delete("/v1/sessions/{session:.+}", self.end),  # a named id may hold "/"
                web.post("/v1/sessions/{session:.+}/prepare", self.prepare),
                web.post("/flush_cache", self.flush),  # SGLang's
                web.post("/reset_prefix_cache", self.flush)]  # vLLM's

    async def end(self, request: web.Request) -> web.Response:
        session = request.match_info["session"]
        known = await self._call(request, session, "end", self.gateway.backend.end_session)
        if not known:
            raise _not_found(session)
        return web.json_response({"id": session, "object": "session.deleted", "deleted": True})

    async def prepare(self, request: web.Request) -> web.Response:
        session = request.match_info["session"]
        reply = await self._call(request, session, "prepare",
                                 self.gateway.backend.prepare_session)
        if not reply.known or reply.tier not in KV_TIERS:
            raise _not_found(session)
        return web.json_response({"id": session, "object": "session.prepare",
                                  "kv_tier": KV_TIERS[reply.tier]}, status=202)

    async def flush(self, request: web.Request) -> web.Response:
        reply = await self._call(request, None, "flush", self.gateway.backend.flush_sessions)
        body = {"flushed": not reply.busy, "sessions_ended": reply.ended,
                "sessions_busy": reply.busy}
        if reply.busy:
            body["message"] = (f"{reply.busy} conversations had a turn running and were kept; "
                               "flush again once they have finished")
        return web.json_response(body, status=409 if reply.busy else 200)

    async def _call(self, request: web.Request, session: str | None, verb: str, rpc):
        """`rpc(tenant, scoped session, timeout)` (no session: `rpc(tenant, timeout)`) under
        the tenant's limits, as for a turn; its gRPC errors as HTTP ones."""
        gateway = self.gateway
        tenant = gateway._tenant(request)
        named = ()
        if session is not None:
            session = from_header(session, "session")  # as x-bidaw-session named it
            check_session_id(session, gateway.config.max_session_id, "session")
            named = (scoped_session(tenant, session),)
        gateway._admit_tenant(tenant)  # the tenant's rate and concurrency, as for a turn
        try:
            return await rpc(tenant, *named, gateway.config.request_timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ApiError(504, TIMEOUTS[verb], None, "timeout") from None
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # an older scheduler behind us
                raise ApiError(501, f"the scheduler behind this gateway cannot {verb} sessions "
                               "(an older version)", None, "not_implemented") from None
            raise from_grpc(exc, gateway.config.retry_after_s) from None
        finally:
            gateway.tenant_in_flight.leave(tenant)


def _not_found(session: str) -> ApiError:
    return ApiError(404, f"no session {session[:200]!r} (ended already, or never seen)",
                    "session", "session_not_found")
