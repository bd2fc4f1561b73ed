"""Typed, range-checked fields of a request body. Every error names the field as the client
sent it, and every integer is bounded before it reaches a fixed-width proto field."""
from __future__ import annotations

from services.gateway.errors import bad_request
from services.runtime.limits import INT32_MAX, MAX_SESSION_ID_BYTES, UINT32_MAX  # noqa: F401

UINT64_MAX = (1 << 64) - 1

_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
          list: "an array", dict: "an object"}


def check_token_ids(ids: list[int], vocab_size: int, param: str, what: str = "token id") -> None:
    """400 naming `param` for the first id outside the vocabulary (`vocab_size` 0: unknown,
    then int32's range)."""
    below = vocab_size or INT32_MAX + 1
    bad = next((t for t in ids if not 0 <= t < below), None)
    if bad is not None:
        raise bad_request(f"{what} {bad} is outside the vocabulary [0, {below})", param)


def typed(body: dict, name: str, kinds: tuple, default=None, param: str | None = None):
    """body[name] if it is one of `kinds` (JSON true is not a number here); `default` when
    absent or null."""
    value = body.get(name)
    if value is None:
        return default
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        kind = " or ".join(dict.fromkeys(_NAMES[k] for k in kinds))
        raise bad_request(f"'{name}' must be {kind}", param or name)
    return value


def integer(body: dict, name: str, low: int, high: int, default: int | None = None,
            param: str | None = None) -> int | None:
    value = typed(body, name, (int,), None, param)
    if value is None:
        return default
    if not low <= value <= high:
        raise bad_request(f"'{name}' must be an integer in [{low}, {high}], not {value}",
                          param or name)
    return value


def number(body: dict, name: str, low: float, high: float, default: float,
           low_open: bool = False) -> float:
    """A JSON number in [low, high] ((low, high] when low_open); NaN and infinities fail."""
    value = typed(body, name, (int, float))
    if value is None:
        return default
    value = float(value)
    if not (low < value if low_open else low <= value) or not value <= high:
        span = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise bad_request(f"'{name}' must lie in {span}, not {value:g}", name)
    return value


def cache_salt(body: dict) -> str:
    """vLLM's cache_salt: "" when absent; else a non-empty string of at most 256 bytes."""
    salt = body.get("cache_salt")
    if salt is not None and not (isinstance(salt, str) and
                                 0 < len(salt.encode()) <= MAX_SESSION_ID_BYTES):
        raise bad_request(f"'cache_salt' must be a non-empty string of at most "
                          f"{MAX_SESSION_ID_BYTES} bytes", "cache_salt")
    return salt or ""
