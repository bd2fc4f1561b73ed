"""The shared cluster token that guards run-time membership (Register/Deregister).

Without it anyone who reaches the scheduler's port can add a "worker" that the scheduler then
sends turns to, or remove real members. With `--cluster-token` (better: env
BIDAW_<SVC>_CLUSTER_TOKEN or `--cluster-token-file`, which `ps` does not show) set on the
scheduler, a member must send the same token in gRPC metadata; it is compared in constant time
and never logged. mTLS (services/tls.py) authenticates the connection; the token decides who may
change membership, and also works without TLS on a trusted network.
"""
from __future__ import annotations

import hmac

import grpc

METADATA_KEY = "x-bidaw-cluster-token"
_resolved: dict[tuple[str, str], str] = {}


def resolve_token(token: str, token_file: str) -> str:
    """The token from --cluster-token or --cluster-token-file ("" when neither); ValueError
    naming the flag when it cannot be used."""
    if token and token_file:
        raise ValueError("--cluster-token and --cluster-token-file are both set: give one")
    flag = "--cluster-token-file" if token_file else "--cluster-token"
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ValueError(f"--cluster-token-file {token_file}: cannot read it ({why})") from None
        if not token:
            raise ValueError(f"--cluster-token-file {token_file}: the file is empty")
    # gRPC metadata values are printable ASCII; say so here rather than fail on every beat.
    if token and not (token.isascii() and token.isprintable() and token == token.strip()):
        raise ValueError(f"{flag}: the token must be printable ASCII without surrounding spaces")
    return token


def config_token(config) -> str:
    """resolve_token for a service config, read once per process (the file is not re-read on
    every heartbeat); ValueError naming the flag."""
    key = (getattr(config, "cluster_token", "") or "",
           getattr(config, "cluster_token_file", "") or "")
    if key not in _resolved:
        _resolved[key] = resolve_token(*key)
    return _resolved[key]


def call_metadata(token: str) -> tuple[tuple[str, str], ...] | None:
    """What a member sends with Register/Deregister."""
    return ((METADATA_KEY, token),) if token else None


def authorize(context: grpc.ServicerContext, config) -> None:
    """Abort the call with UNAUTHENTICATED unless it carries the scheduler's cluster token (when
    one is configured). One message for a wrong and a missing token: nothing to probe."""
    try:
        expected = config_token(config)
    except ValueError:  # checked at start; a file gone since then must not open the door
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "the scheduler's cluster token is "
                      "unreadable")
    if not expected:
        return
    sent = next((v for k, v in context.invocation_metadata() if k == METADATA_KEY), "")
    sent = sent if isinstance(sent, bytes) else str(sent).encode()
    if not hmac.compare_digest(sent, expected.encode()):
        context.abort(grpc.StatusCode.UNAUTHENTICATED,
                      f"membership needs the cluster token (gRPC metadata {METADATA_KEY})")
