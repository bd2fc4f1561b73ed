"""API keys to tenants, and tenant-scoped session ids.

A key is compared against every configured key with hmac.compare_digest and no early exit, so
neither the match nor its position leaks through timing. Keys are never logged; tenants are.
"""
from __future__ import annotations

import hmac
import re

from services.gateway.config import GatewayConfig
from services.runtime.turn_bounds import TENANT_RE

OPEN_TENANT = "default"  # the one tenant of a gateway without keys
MAX_KEY = 4096  # an HTTP header line longer than aiohttp's 8 KiB limit could never carry it
KEY_RE = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_KEY)


def parse_keys(text: str, source: str) -> list[tuple[str, str]]:
    """`tenant:key` pairs separated by commas or newlines (`tenant key` also works in files)."""
    pairs = []
    for raw in re.split(r"[,\n]", text):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tenant, sep, key = line.partition(":") if ":" in line else line.partition(" ")
        tenant, key = tenant.strip(), key.strip()
        if not sep or not key:
            raise ValueError(f"{source}: an entry is not `tenant:key`")  # never echo the key
        if not TENANT_RE.fullmatch(tenant):
            raise ValueError(f"{source}: tenant {tenant!r} must match {TENANT_RE.pattern}")
        if not KEY_RE.fullmatch(key):  # one no client could send (never echoed)
            raise ValueError(f"{source}: tenant {tenant}'s key must be 1 to {MAX_KEY} printable "
                             "ASCII characters without spaces (a bearer token)")
        pairs.append((tenant, key))
    return pairs


class Tenants:
    """Resolves the bearer token of a request to its tenant."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self._keys = [(key.encode(), tenant) for tenant, key in pairs]
        if len({k for k, _ in self._keys}) != len(self._keys):
            raise ValueError("--api-keys / --api-keys-file: the same API key is given to two "
                             "entries")

    @classmethod
    def from_config(cls, config: GatewayConfig) -> "Tenants":
        pairs = parse_keys(config.api_keys, "--api-keys")
        if config.api_keys_file:
            with open(config.api_keys_file, "rb") as fh:
                raw = fh.read()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"--api-keys-file {config.api_keys_file}: not UTF-8 text "
                                 f"(byte {exc.start + 1})") from None
            pairs += parse_keys(text, f"--api-keys-file {config.api_keys_file}")
        return cls(pairs)

    @property
    def open(self) -> bool:
        return not self._keys

    def may_read_metrics(self, authorization: str | None, metrics_key: str) -> bool:
        """/metrics: open without keys; otherwise the metrics key or any tenant's key (the
        counters show every tenant's traffic, so not for the public)."""
        if self.open:
            return True
        scheme, _, token = (authorization or "").partition(" ")
        given = token.strip().encode("utf-8", "surrogateescape")
        by_metrics_key = bool(metrics_key) and scheme.lower() == "bearer" and \
            hmac.compare_digest(given, metrics_key.encode())
        return self.resolve(authorization) is not None or by_metrics_key

    def resolve(self, authorization: str | None) -> str | None:
        """The tenant of an `Authorization: Bearer KEY` header; None if it is not a known key.
        Without configured keys every request belongs to the open tenant."""
        if self.open:
            return OPEN_TENANT
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip().encode("utf-8", "surrogateescape")  # the raw header bytes
        found = None
        for key, tenant in self._keys:
            if hmac.compare_digest(given, key) and found is None:
                found = tenant
        return found


def scoped_session(tenant: str, session: str) -> str:
    """The id the scheduler sees: the tenant's namespace, so that tenant B sending tenant A's
    session id reaches a different session (its own), never A's KV."""
    return f"{tenant}/{session}"
