"""Strict check of the address a member registers: the scheduler will dial it, so it must be a
plain host:port and nothing a gRPC target could read otherwise (unix:, dns:///, a path)."""
from __future__ import annotations

import ipaddress
import re

MAX_ADDRESS = 262  # a 253-character DNS name, ':' and a port; a bracketed IPv6 fits too
_PORT = r"(?P<port>[1-9][0-9]{0,4})"
_BRACKETED = re.compile(r"\[(?P<host>[0-9A-Fa-f:.]+)\]:" + _PORT)
_PLAIN = re.compile(r"(?P<host>[A-Za-z0-9.-]+):" + _PORT)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def address_problem(address: str) -> str | None:
    """Why `address` is not an acceptable member address, or None when it is: a DNS name, an
    IPv4 literal or a bracketed IPv6 literal, then ':' and a port in 1-65535."""
    if not address:
        return "address is empty; expected host:port"
    if len(address) > MAX_ADDRESS:
        return f"address is longer than {MAX_ADDRESS} characters"
    match = _BRACKETED.fullmatch(address)
    if match:
        try:
            ipaddress.IPv6Address(match["host"])
        except ValueError:
            return f"address {address!r}: not an IPv6 literal inside the brackets"
    else:
        match = _PLAIN.fullmatch(address)
        if match is None:
            return (f"address {address[:80]!r} must be host:port (a DNS name, an IPv4 literal "
                    "or [IPv6]; no scheme, path, user or spaces)")
        host = match["host"]
        labels = host.split(".")
        if labels[-1].isdigit():  # a top-level label is never all digits: an IPv4 literal
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                return f"address {address!r}: {host!r} is not a valid IPv4 address"
        elif len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
            return f"address {address!r}: {host!r} is not a valid DNS name"
    if int(match["port"]) > 65535:
        return f"address {address!r}: port must be in 1-65535"
    return None
