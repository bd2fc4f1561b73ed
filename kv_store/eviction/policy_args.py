"""Experiment knobs given by name (`bidaw simulate --policy-arg bidaw-size.size_exponent=0.3`):
each value checked against the type its constructor declares, before any policy runs, so a
string or a list where a number goes is one line naming the knob, not a TypeError deep inside a
replay. Pure: no I/O."""
from __future__ import annotations

import inspect
import math
import types
import typing
from typing import Any


def checked_args(cls: type, args: dict[str, Any]) -> dict[str, Any]:
    """`args` for `cls(**args)`, lists given where a tuple is declared turned into tuples;
    ValueError naming the first key `cls` does not take or whose value is not of its type."""
    hints = _init_hints(cls)
    out = {}
    for key, value in args.items():
        if key not in hints:
            raise ValueError(f"{key!r} is not a setting of {cls.__name__} "
                             f"(its settings: {', '.join(sorted(hints))})")
        ok, converted = _conform(value, hints[key])
        if not ok:
            raise ValueError(f"{key}={value!r} is not {_describe(hints[key])}")
        out[key] = converted
    return out


def _init_hints(cls: type) -> dict[str, Any]:
    """Every keyword the constructor takes, with its declared type, along the MRO (a subclass
    passes **kwargs on to its base)."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        declared = typing.get_type_hints(init)
        for name, param in inspect.signature(init).parameters.items():
            if name != "self" and param.kind in (param.KEYWORD_ONLY,
                                                 param.POSITIONAL_OR_KEYWORD):
                hints[name] = declared.get(name, Any)
    return hints


def _conform(value: Any, hint: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(hint):
            ok, converted = _conform(value, member)
            if ok:
                return True, converted
        return False, value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value)
        return ok, float(value) if ok else value
    if hint is str:
        return isinstance(value, str), value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False, value
        inner = [a for a in typing.get_args(hint) if a is not Ellipsis] or [Any]
        items = [_conform(v, inner[0]) for v in value]
        if not all(ok for ok, _ in items):
            return False, value
        return True, origin(v for _, v in items)
    return True, value  # a type this check does not know: the constructor decides


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(m) for m in typing.get_args(hint))
    names = {bool: "true/false", int: "an integer", float: "a finite number", str: "a string",
             type(None): "null"}
    if hint in names:
        return names[hint]
    if typing.get_origin(hint) in (tuple, list):
        return f"a list of {_describe((typing.get_args(hint) or (Any,))[0])}"
    return str(hint)
