"""Reading a turn's request body: bounded in size and in time, and always before the turn takes an
admission slot, so that a slow or stalled upload holds only its own connection, never a slot
other clients wait for.

aiohttp raises RequestPayloadError when the body cannot be read as framed (a gzip or deflate
body that does not decompress, a chunked body cut short): that is the client's fault, a 400."""
from __future__ import annotations

import asyncio

from aiohttp import web

from services.gateway.errors import ApiError
from services.gateway.json_body import load_body


async def read_body(request: web.Request, max_bytes: int, timeout_s: float) -> dict:
    """The body as a checked JSON object; 413 over `max_bytes`, 408 when it has not fully
    arrived within `timeout_s`, 400 when it is not what its headers say."""
    if (request.content_length or 0) > max_bytes:
        raise ApiError(413, f"request body exceeds {max_bytes} bytes", None, "request_too_large")
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.read()  # aiohttp enforces client_max_size on chunked bodies
    except TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {timeout_s:g} s", None,
                       "request_timeout") from None
    except web.RequestPayloadError as exc:
        cause = type(exc.__cause__).__name__ if exc.__cause__ else "truncated or misframed"
        encoding = request.headers.get("Content-Encoding")
        what = f"does not match its Content-Encoding {encoding[:40]!r}" if encoding else \
            "does not match its framing (Content-Length or chunked)"
        raise ApiError(400, f"the request body could not be read: it {what} ({cause})", None,
                       "invalid_body") from None
    return load_body(raw)
