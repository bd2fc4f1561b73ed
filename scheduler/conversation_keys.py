"""Canonical chained hashes of a chat history: the key of every prefix of its messages.

k_0 = H(salt, tenant); k_i = H(k_{i-1}, role_i, content_i). Equal keys mean the same tenant sent
the same messages in the same order, whatever model serves them, so a client that resends a
history (with our answers as we returned them) is recognised by the key of what it sent. Roles
are normalised as the gateway does (developer -> system) and content is whitespace-stripped, so
a client that trims answers still matches. Each field is length-prefixed: no two different
histories serialise to the same bytes.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

DIGEST_BYTES = 12  # 96 bits: a collision among 10^9 stored prefixes has odds ~10^-11
_PERSON = b"bidaw-conv-v1"  # domain separation (and the version of this scheme)
_ROLES = {"developer": "system"}


def _h(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=_PERSON)
    for part in parts:
        h.update(len(part).to_bytes(4, "little"))
        h.update(part)
    return h.digest()


def root_key(tenant: str) -> bytes:
    """k_0: the tenant's namespace; no prefix of one tenant equals one of another's."""
    return _h(b"tenant", tenant.encode())


def next_key(previous: bytes, role: str, content: str) -> bytes:
    role = role.strip().lower()
    return _h(previous, _ROLES.get(role, role).encode(), content.strip().encode())


def prefix_keys(tenant: str, messages: Iterable[tuple[str, str]]) -> list[bytes]:
    """[k_0, k_1, ..., k_n]: k_i is the key of the first i (role, content) messages."""
    keys = [root_key(tenant)]
    for role, content in messages:
        keys.append(next_key(keys[-1], role, content))
    return keys
