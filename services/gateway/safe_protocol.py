"""aiohttp's answer to a request it cannot parse (a control byte in a header, a line too long)
echoes the offending line in a text/plain 400 and logs it with a traceback: with an
`Authorization` header, the API key. Here such a request gets an OpenAI-style JSON 400 naming
only the kind of fault, and one log line without the request's bytes. A body that does not
decode is answered by the handler (400) and logged once, by the access line."""
from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

from services.gateway.errors import ApiError

log = logging.getLogger("bidaw.gateway")


class _RedactingHandler(RequestHandler):
    def log_exception(self, *args, **kw):
        # A body that does not decompress fails again when aiohttp drains it after the handler
        # answered 400 (request_body.py): the client's fault, already answered, no traceback.
        if isinstance(kw.get("exc_info"), web.RequestPayloadError):
            return
        super().log_exception(*args, **kw)

    def handle_error(self, request, status=500, exc=None, message=None):
        if status >= 500 or exc is None:
            return super().handle_error(request, status, exc, message)
        log.info("malformed HTTP request from %s: %s %d (its bytes are not logged)",
                 request.remote, type(exc).__name__, status)
        response = ApiError(status, f"malformed HTTP request ({type(exc).__name__}); the "
                            "offending bytes are not echoed", None, "invalid_request").response()
        response.force_close()
        return response


class _RedactingServer(Server):
    def __call__(self) -> RequestHandler:
        return _RedactingHandler(self, loop=self._loop, **self._kwargs)


class RedactingAppRunner(web.AppRunner):
    """An AppRunner whose connections answer unparsable requests without echoing them."""

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _RedactingServer
        return server
