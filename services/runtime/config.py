"""Typed service configuration, loaded in one place: defaults < YAML file < environment < flags.

Every service declares one dataclass; `add_config_args` turns its fields into `--kebab-case` flags
(with help from the field's `metadata["help"]`), and `load_config` builds the object. Fields whose
name ends in `_bytes` accept sizes such as `64MiB` or `2GB`.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import typing

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_size(text: str | int) -> int:
    """'64MiB' -> 67108864. Plain integers are bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 64MiB, 2GB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _convert(field: dataclasses.Field, hint: typing.Any, raw: typing.Any) -> typing.Any:
    """`raw` (a flag's or env var's text, or a YAML value) as the field's type; ValueError for
    anything else (never TypeError: a YAML list where a number goes is a user's mistake)."""
    if field.name.endswith("_bytes"):
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ValueError(f"not a size: {raw!r}")
        return parse_size(raw)
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        word = str(raw).strip().lower() if isinstance(raw, (str, int)) else None
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(f"not a boolean: {raw!r} (true/false, yes/no, on/off, 1/0)")
    if hint is int:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ValueError(f"not an integer: {raw!r}")
        try:
            return int(raw)
        except ValueError:  # int()'s own words name Python, not the setting
            raise ValueError(f"not an integer: {raw!r}") from None
    if hint is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise ValueError(f"not a number: {raw!r}")
        value = float(raw)
        if not math.isfinite(value):  # a duration or a rate of inf/nan runs on nonsense
            raise ValueError(f"not a finite number: {raw!r}")
        return value
    if typing.get_origin(hint) is list:
        items = raw if isinstance(raw, list) else [s for s in str(raw).split(",") if s]
        if not all(isinstance(i, (str, int, float)) and not isinstance(i, bool) for i in items):
            raise ValueError(f"not a list of values: {raw!r}")
        return [str(i) for i in items]
    if raw is not None and not isinstance(raw, (str, int, float)):
        raise ValueError(f"not a string: {raw!r}")
    return raw if raw is None else str(raw)


def check_bounds(config, at_least: dict[str, float] | None = None,
                 above: dict[str, float] | None = None) -> None:
    """ValueError naming the first field of `config` below its bound (`at_least`: >=, `above`:
    >; NaN fails both): for a config's __post_init__, so a bad flag is refused at start."""
    for name, low in (at_least or {}).items():
        value = getattr(config, name)
        if not value >= low:
            raise ValueError(f"{_flag(name)} must be >= {_number(low)}, got {value!r}")
    for name, low in (above or {}).items():
        value = getattr(config, name)
        if not value > low:
            raise ValueError(f"{_flag(name)} must be > {_number(low)}, got {value!r}")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"  # 78643200, not 7.86432e+07


def field_default(cls: type, name: str) -> typing.Any:
    """The default of field `name` of config dataclass `cls` (the one place it is written)."""
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if field is None:
        raise ValueError(f"{cls.__name__} has no field {name!r}")
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()


def field_help(cls: type, name: str) -> str:
    """Field `name`'s help text, ending with its default (a size in binary units)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    default = field_default(cls, name)
    if name.endswith("_bytes") and isinstance(default, int) and default:
        unit = next((u for u in ("TiB", "GiB", "MiB", "KiB") if default % _UNITS[u.lower()] == 0),
                    "")
        default = f"{default // _UNITS[unit.lower()]}{unit}" if unit else default
    return f"{field.metadata.get('help', '')} (default: {default})"


def config_flags(cls: type, **values: typing.Any) -> list[str]:
    """The flags that give config `cls` these field values (what a launcher passes to
    `bidaw serve`); ValueError for a name that is not one of its fields."""
    flags = []
    for name, value in values.items():
        field_default(cls, name)  # a field of cls, or ValueError
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        flags += [_flag(name), str(value)]
    return flags


def add_config_args(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one flag per field of the config dataclass `cls`, plus `--config FILE.yaml`."""
    parser.add_argument("--config", metavar="FILE", help="YAML file with the same keys as the flags")
    for field in dataclasses.fields(cls):
        parser.add_argument(_flag(field.name), dest=f"cfg_{field.name}", default=None,
                            metavar=field.name.upper(), help=field_help(cls, field.name))


def load_config(cls: type, args: argparse.Namespace | None = None, env_prefix: str = "",
                **overrides: typing.Any):
    """Build `cls` from its defaults, the YAML file in args.config, env vars, flags, overrides.
    ValueError naming where a bad value came from (the flag, the env var or the file's key)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, typing.Any] = {}
    source: dict[str, str] = {}
    path = getattr(args, "config", None) if args is not None else None
    if path:
        data = read_yaml_mapping(path)
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
        values.update(data)
        source.update({k: f"{path}: {k}" for k in data})
    for field in dataclasses.fields(cls):
        name = f"{env_prefix}{field.name.upper()}"
        env = os.environ.get(name) if env_prefix else None
        if env is not None:
            values[field.name], source[field.name] = env, name
        flag = getattr(args, f"cfg_{field.name}", None) if args is not None else None
        if flag is not None:
            values[field.name], source[field.name] = flag, _flag(field.name)
    values.update(overrides)
    converted = {}
    for field in dataclasses.fields(cls):
        if field.name in values:
            try:
                converted[field.name] = _convert(field, hints[field.name], values[field.name])
            except ValueError as exc:
                where = source.get(field.name, _flag(field.name))
                raise ValueError(f"{where}: {exc}") from None
    return cls(**converted)


def read_yaml_mapping(path: str) -> dict[str, typing.Any]:
    """The `--config` file: a YAML mapping of field names to values; ValueError saying why not
    (its line for a YAML error). Safe loading only: no tags that build Python objects."""
    import yaml

    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start + 1})") from None
    except RecursionError:
        raise ValueError(f"{path}: YAML nested too deep") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{path}: not YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path}: must be a mapping of setting names to values "
                         f"(like `listen: 0.0.0.0:50052`)")
    return data
