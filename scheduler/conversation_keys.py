"""Canonical chained hashes of a history: chat messages, a raw text prompt, or token ids.

Messages: k_0 = H("tenant", tenant); k_i = H(k_{i-1}, role_i, content_i). Equal keys mean the
same tenant sent the same messages in the same order, whatever model serves them, so a client
that resends a history (with our answers as we returned them) is recognised by the key of what it
sent. Roles are normalised as the gateway does (developer -> system) and content is
whitespace-stripped, so a client that trims answers still matches. Before each k_i come the keys
of its content's whole chunks (TEXT_CHUNK characters, chained from k_{i-1}): they are never a
session's head, but two conversations whose message i begins alike (a shared instruction or
document before each user's question, as vLLM's multi-turn benchmark sends) share them, so the
later one branches from the KV of the earlier one's beginning.

Raw text and token ids have no message boundaries: they are cut into fixed-size chunks and k_j
is the key of the first j chunks, so a history sent again with more appended shares every key of
its whole chunks. The key of any prefix (a recorded history ends mid-chunk) is the key of the
chunk boundary before it plus the rest: `head(length)`, exact, so "continue" is decided on the
whole recorded text. Each space has its own root tag (messages, text, ids), and every field is
length-prefixed: no two different histories serialise to the same bytes.
"""
from __future__ import annotations

import hashlib
import sys
from array import array
from typing import Iterable, Sequence

from scheduler.conversation_records import Prompt

DIGEST_BYTES = 12  # 96 bits: a collision among 10^9 stored prefixes has odds ~10^-11
_PERSON = b"bidaw-conv-v1"  # domain separation (and the version of this scheme)
_ROLES = {"developer": "system"}
TEXT_CHUNK = 256  # characters: a 100 KB history is ~400 hashes
IDS_CHUNK = 64  # token ids
TRIMS = 16  # paragraph breaks of a question tried as where an appended reminder began


def _h(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=_PERSON)
    for part in parts:
        h.update(len(part).to_bytes(4, "little"))
        h.update(part)
    return h.digest()


def root_key(tenant: str, space: bytes = b"tenant", salt: str = "") -> bytes:
    """k_0: the tenant's namespace in one key space (and, with a cache salt, that salt's
    within the tenant's); no key of one equals one of another."""
    return _h(space, tenant.encode(), *((salt.encode(),) if salt else ()))


def next_key(previous: bytes, role: str, content: str) -> bytes:
    role = role.strip().lower()
    return _h(previous, _ROLES.get(role, role).encode(), content.strip().encode())


def message_keys(previous: bytes, role: str, content: str) -> list[bytes]:
    """What one message adds after `previous`: its content's whole chunks' keys, then its own."""
    part, parts = previous, []
    tag = _ROLES.get(role.strip().lower(), role.strip().lower()).encode()
    text = content.strip()
    for start in range(0, len(text) - TEXT_CHUNK + 1, TEXT_CHUNK):
        part = _h(part, b"part", tag, _text_bytes(text[start:start + TEXT_CHUNK]))
        parts.append(part)
    return parts + [next_key(previous, role, content)]


def prefix_keys(tenant: str, messages: Iterable[tuple[str, str]], salt: str = "") -> list[bytes]:
    """k_0, then per message its chunks' keys and k_i, the key of the first i messages."""
    keys = [root_key(tenant, salt=salt)]
    for role, content in messages:
        keys += message_keys(keys[-1], role, content)
    return keys


def trimmed_keys(stem: bytes, role: str, content: str, most: int = TRIMS) -> tuple[bytes, ...]:
    """Keys of a message after `stem` cut at each of its last `most` paragraph breaks."""
    text = content.strip()
    cuts, at = [], text.rfind("\n\n")
    while at > 0 and len(cuts) < most:
        cuts.append(next_key(stem, role, text[:at]))
        at = text.rfind("\n\n", 0, at)
    return tuple(cuts)


class MessageHistory:
    """A chat history: one key per message; its key after the answer is recorded."""
    head = None  # a message session's head is one of `keys` itself

    def __init__(self, tenant: str, messages: Iterable[tuple[str, str]], salt: str = ""):
        messages = list(messages)
        self.keys = prefix_keys(tenant, messages[:-1], salt)
        self._stem = self.keys[-1]  # the key before the last message's (its trims' base)
        self._last = messages[-1] if messages else ("", "")
        if messages:
            self.keys += message_keys(self._stem, *self._last)
        self.extent = len(messages)  # what "longer" compares (conversations.py: REVISED)

    def prompt(self) -> Prompt:
        role, content = self._last
        if role.strip().lower() != "user":
            return Prompt(self.keys[-1])
        return Prompt(self.keys[-1], trims=trimmed_keys(self._stem, role, content))

    def after(self, text: str, ids: Sequence[int]) -> tuple[list[bytes], int]:
        """(prefix keys of the history with the answer appended, -1: heads are exact keys)."""
        return self.keys + message_keys(self.keys[-1], "assistant", text), -1

    def now(self) -> tuple[list[bytes], int]:
        """The history's own keys, with no answer (a turn stopped by its client)."""
        return self.keys, -1


def _text_bytes(units: str) -> bytes:
    return units.encode("utf-8", "surrogatepass")


def _ids_bytes(units: Sequence[int]) -> bytes:
    ids = array("i", units)
    if sys.byteorder == "big":  # little-endian everywhere: the keys outlive the process (journal)
        ids.byteswap()
    return ids.tobytes()


class ChunkedHistory:
    """A raw text (str) or token ids (list of int): keys of every chunk boundary, and the exact
    key of any prefix. Hashed once per turn; the answer only extends it."""

    def __init__(self, tenant: str, units: str | Sequence[int], keys: list[bytes] | None = None,
                 salt: str = ""):
        self.units = units
        text = isinstance(units, str)
        self._chunk, self._bytes = (TEXT_CHUNK, _text_bytes) if text else (IDS_CHUNK, _ids_bytes)
        self._tenant, self._salt = tenant, salt
        self.extent = len(units)
        self.keys = keys or [root_key(tenant, b"text" if text else b"ids", salt)]
        for start in range((len(self.keys) - 1) * self._chunk,
                           len(units) - self._chunk + 1, self._chunk):
            self.keys.append(_h(self.keys[-1], self._bytes(units[start:start + self._chunk])))

    def head(self, length: int) -> bytes | None:
        """The key of units[:length]; None past the end."""
        if not 0 <= length <= len(self.units):
            return None
        base = length // self._chunk
        return _h(self.keys[base], b"end", self._bytes(self.units[base * self._chunk:length]))

    def prompt(self) -> Prompt:
        return Prompt(self.head(len(self.units)), self.keys[-1], len(self.units))

    def after(self, text: str, ids: Sequence[int]) -> tuple[list[bytes], int]:
        """(boundary keys of the history with the answer appended, then its head; its length)."""
        more = text if isinstance(self.units, str) else list(ids)
        whole = ChunkedHistory(self._tenant, self.units + more, list(self.keys), self._salt)
        return whole.now()

    def now(self) -> tuple[list[bytes], int]:
        """(boundary keys, then the head of the whole history; its length)."""
        return self.keys + [self.head(len(self.units))], len(self.units)
