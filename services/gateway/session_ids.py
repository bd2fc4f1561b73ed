"""Session ids in HTTP headers and paths. A session id is any printable text (a JSON `user` may
be non-ASCII), but a header value is ASCII in practice, so the gateway names a session outside
the JSON body by its percent-encoding: UTF-8 bytes as %XX for anything but visible ASCII, `%`
itself, and spaces at either end (which header parsing strips). Incoming session headers and
/v1/sessions/{id} are decoded the same way, so the `x-bidaw-session` value a client reads,
sent back, names the same session, and two ids never share a value. Ids of visible ASCII
without `%` (inner spaces too) are the same in both forms."""
from __future__ import annotations

import re
from urllib.parse import quote, unquote

from services.gateway.errors import bad_request

# visible ASCII and the space, less `%` and what quote() keeps anyway (letters, digits, _.-~)
_KEPT = "".join(c for c in map(chr, range(0x20, 0x7F)) if c != "%" and not c.isalnum())
_EDGE_SPACES = re.compile(r"^ +| +$")


def to_header(session: str) -> str:
    """The header (and path) form of `session`."""
    value = quote(session, safe=_KEPT)
    return _EDGE_SPACES.sub(lambda m: "%20" * len(m.group()), value)


def from_header(value: str, param: str) -> str:
    """The session a header or path value names; 400 naming `param` if its escapes are not
    UTF-8. A `%` not followed by two hex digits stands for itself."""
    if "%" not in value:
        return value
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError:
        raise bad_request(f"{param} has percent-escapes that are not UTF-8 text", param) \
            from None
