"""DELETE /v1/sessions/{session}: a client ends a conversation, and its KV goes.

The id is the one a turn's `x-bidaw-session` header named (the client's own X-Session-Id, or
the id the scheduler gave a conversation it recognised), inside the caller's tenant: one tenant
can never end another's. The scheduler waits for a turn of the session that is running, then
forgets the conversation and tells the store shard to free its KV from DRAM and SSD. The answer
is OpenAI's deletion object; an id nothing knows (never seen, or ended already) is a 404.
"""
from __future__ import annotations

import grpc
from aiohttp import web

from services.gateway.auth import scoped_session
from services.gateway.errors import ApiError, from_grpc
from services.gateway.turns import check_session_id


class SessionsApi:
    def __init__(self, gateway):
        self.gateway = gateway

    def routes(self) -> list:
        return [web.delete("/v1/sessions/{session:.+}", self.end)]  # a named id may hold "/"

    async def end(self, request: web.Request) -> web.Response:
        gateway = self.gateway
        tenant = gateway._tenant(request)
        session = request.match_info["session"]
        check_session_id(session, gateway.config.max_session_id, "session")
        gateway._admit_tenant(tenant)  # the tenant's rate and concurrency, as for a turn
        try:
            known = await gateway.backend.end_session(tenant, scoped_session(tenant, session),
                                                      gateway.config.request_timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ApiError(504, "a turn of this session is still running; retry once it "
                               "has finished", None, "timeout") from None
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # an older scheduler behind us
                raise ApiError(501, "the scheduler behind this gateway cannot end sessions "
                               "(an older version)", None, "not_implemented") from None
            raise from_grpc(exc, gateway.config.retry_after_s) from None
        finally:
            gateway.tenant_in_flight.leave(tenant)
        if not known:
            raise ApiError(404, f"no session {session[:200]!r} (ended already, or never seen)",
                           "session", "session_not_found")
        return web.json_response({"id": session, "object": "session.deleted", "deleted": True})
