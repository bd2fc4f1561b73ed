"""Generic checks of a request body before any parameter is read: bounded JSON nesting, no lone
surrogates, integers a 64-bit field (signed or not) can hold, finite numbers. Each refusal is a
400 that names the field path where there is one; none of them lets a malformed body reach a
handler as a 500.

`json.loads` recurses once per nesting level, so the depth is measured on the raw bytes first,
at C speed and never by recursing: strings removed, brackets kept, then the running depth as a
cumulative sum (numpy), for the rare body with more than MAX_DEPTH brackets at all.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np

from services.gateway.errors import ApiError

MAX_DEPTH = 64
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1  # int64 and uint64 fields (seed)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1
_SURROGATE = re.compile("[\ud800-\udfff]")


def _invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param, "invalid_json" if param is None else "invalid_value")


def nesting_ok(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """True if `raw` nests arrays/objects at most `limit` deep (brackets inside strings do not
    count). Unbalanced brackets count as too deep: such a body is not JSON anyway."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return True
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return True
    depth = np.cumsum(_STEP[np.frombuffer(brackets, dtype=np.uint8)], dtype=np.int64)
    return int(depth.max()) <= limit and int(depth.min()) >= 0 and int(depth[-1]) == 0


def _path(parent: str, key) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


def check_values(value, path: str = "") -> None:
    """Raise a 400 naming the first string with a lone surrogate, the first integer outside a
    64-bit range (int64 or uint64) or the first non-finite number. Depth is already bounded."""
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise _invalid(f"'{p or 'body'}' contains a lone UTF-16 surrogate (not valid "
                               "Unicode text)", p or None)
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if not INT_MIN <= v <= INT_MAX:
                raise _invalid(f"'{p}' is outside the 64-bit integer range", p or None)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise _invalid(f"'{p}' is not a finite number", p or None)
        elif isinstance(v, dict):
            for k, item in v.items():
                if _SURROGATE.search(k):
                    raise _invalid(f"a key of '{p or 'body'}' contains a lone UTF-16 "
                                   "surrogate", p or None)
                stack.append((item, _path(p, k)))
        elif isinstance(v, list):
            if v and all(type(x) is int for x in v) and INT_MIN <= min(v) and max(v) <= INT_MAX:
                continue  # token ids: checked at C speed
            stack.extend((item, _path(p, i)) for i, item in enumerate(v))


def load_body(raw: bytes) -> dict:
    """The request body as a checked JSON object, or an ApiError (400)."""
    if not nesting_ok(raw):
        raise _invalid(f"the body nests arrays/objects deeper than {MAX_DEPTH} levels (or its "
                       "brackets do not balance)")
    try:
        body = json.loads(raw)  # NaN/Infinity parse, then are refused by path below
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # ValueError covers integers too long to convert (over 4300 digits)
        raise _invalid(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", None, "invalid_request")
    check_values(body)
    return body
