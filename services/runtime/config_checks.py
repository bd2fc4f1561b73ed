"""A service's flags that name a directory, a file or an address to listen on, checked before
it starts: a wrong one is one line naming the flag, not a traceback from deep in the start-up.

By the field's name, for every service alike: `*_dir` must be a directory it can write, or one
it can make; `*_file` a readable file; `listen` / `*_listen` a HOST:PORT that resolves, port
0-65535. Empty values are the features' "off" and are not checked.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import socket


class ListenError(OSError):
    """A server could not bind the address its `flag` gave (`bidaw serve` says it in one line;
    a port in use is only known when binding)."""

    def __init__(self, flag: str, address: str, reason: str):
        super().__init__(f"{flag} {address}: {reason}")
        self.flag, self.address, self.reason = flag, address, reason


def check_config_paths(config) -> None:
    """ValueError naming the first flag of `config` that cannot work."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not isinstance(value, str) or not value:
            continue
        name = field.name
        problem = (dir_problem(value) if name.endswith("_dir")
                   else file_problem(value) if name.endswith("_file")
                   else listen_problem(value) if name == "listen" or name.endswith("_listen")
                   else None)
        if problem:
            raise ValueError(f"--{name.replace('_', '-')} {value}: {problem}")


def dir_problem(value: str) -> str | None:
    """Why `value` cannot be a directory this process writes in (None: it can)."""
    path = pathlib.Path(value)
    if path.exists():
        if not path.is_dir():
            return "exists and is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else "not writable by this user"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be made: {parent} is not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot be made in {parent}"


def file_problem(value: str) -> str | None:
    path = pathlib.Path(value)
    if not path.exists():
        return "no such file"
    if not path.is_file():
        return "not a file"
    return None if os.access(path, os.R_OK) else "not readable by this user"


def listen_problem(value: str) -> str | None:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return "not HOST:PORT with a port in 0-65535"
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM,
                           flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return f"the host {host!r} does not resolve"
    return None
