"""Cross-origin requests (CORS), for browser front ends that call the API directly.

Off by default: a page from any site could otherwise drive a browser that holds a key to the
API, and an API that holds conversations should say which sites may. `--allowed-origins`
names them (`https://chat.example.com`, or `*` for any, as vLLM's default). For an allowed
origin a preflight (OPTIONS with Access-Control-Request-Method) is answered 204 before any
key is asked for (browsers send none with it), and every answer, streamed ones included,
carries Access-Control-Allow-Origin and exposes the headers clients read. Any other origin
gets no CORS header, so the browser keeps the answer from the page.
"""
from __future__ import annotations

import re

from aiohttp import web

ANY = "*"
METHODS = "GET, POST, DELETE, OPTIONS"
# the answer's headers a page may read: the session it continued, tracing, back-off
EXPOSED = "x-bidaw-session, x-bidaw-session-recognised, x-trace-id, Retry-After"
MAX_AGE_S = "600"
_ORIGIN = re.compile(r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?")
_HEADER_LIST = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*")


def origins_problem(origins: list[str]) -> str | None:
    """Why `origins` is not a list of origins (scheme://host[:port], no path) or `*`, or None."""
    for origin in origins:
        if origin != ANY and not _ORIGIN.fullmatch(origin):
            return (f"--allowed-origins: {origin[:80]!r} is not an origin: give "
                    "scheme://host[:port] (no path, no trailing slash) or *")
    return None


class Cors:
    def __init__(self, origins: list[str]):
        self.any = ANY in origins
        self.origins = frozenset(o.lower() for o in origins if o != ANY)

    def allowed(self, request: web.Request) -> str | None:
        """The Access-Control-Allow-Origin value for this request, or None (no CORS)."""
        origin = request.headers.get("Origin")
        if origin is None or not (self.any or self.origins):
            return None
        if self.any:
            return ANY
        return origin if origin.lower() in self.origins else None

    @web.middleware
    async def preflight(self, request: web.Request, handler):
        """A preflight from an allowed origin: 204 with what it may send. Others go on (an
        OPTIONS no route takes is a 405, without CORS headers)."""
        method = request.headers.get("Access-Control-Request-Method")
        if request.method != "OPTIONS" or method is None or self.allowed(request) is None:
            return await handler(request)
        headers = {"Access-Control-Allow-Methods": METHODS,
                   "Access-Control-Max-Age": MAX_AGE_S}
        asked = request.headers.get("Access-Control-Request-Headers", "")
        if _HEADER_LIST.fullmatch(asked.strip()):  # echoed only if it is a list of names
            headers["Access-Control-Allow-Headers"] = asked.strip()
        return web.Response(status=204, headers=headers)

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Before any answer's headers leave (streams too): the origin's permission."""
        allow = self.allowed(request)
        if allow is None:
            return
        response.headers["Access-Control-Allow-Origin"] = allow
        response.headers["Access-Control-Expose-Headers"] = EXPOSED
        if allow != ANY:
            response.headers.add("Vary", "Origin")
