"""The request headers the gateway reads must be text: aiohttp keeps undecodable header bytes
as lone surrogates (surrogateescape), which would fail later, deep in a handler, as a 500.
Refused up front with a 400 that names the header and never echoes its value (it may be a key)."""
from __future__ import annotations

import re

from services.gateway.errors import ApiError

READ_HEADERS = ("Authorization", "X-Session-Id", "traceparent", "tracestate")
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_headers(headers) -> None:
    for name in READ_HEADERS:
        for value in headers.getall(name, ()):
            if _SURROGATE.search(value):
                raise ApiError(400, f"header {name} is not valid UTF-8 text", name,
                               "invalid_header")
