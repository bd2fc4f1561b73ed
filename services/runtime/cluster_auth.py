"""The cluster token on every internal gRPC call.

One shared secret guards every internal RPC (scheduler, KV store, compute worker): clients send
it as call metadata (an interceptor that services.runtime.grpc_util.channel()/aio_channel() install, so
every client in the tree has it), servers refuse a call without it with UNAUTHENTICATED before
any handler runs. Only the gRPC health service's Check and List stay open, for probes. The comparison is in
constant time and the token is never logged nor echoed in an error. mTLS (services/runtime/tls.py) can
authenticate the connections as well.
"""
from __future__ import annotations

import collections
import hmac
import os
import secrets

import grpc

METADATA_KEY = "x-bidaw-cluster-token"
# Probes (kubelet, grpc-health-probe, `bidaw up`) ask Check (or List) and need no secret. Watch
# is not open: a watch stream never ends, so a stranger could hold as many as it likes.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/List"})
REFUSAL = f"internal gRPC needs the cluster token (gRPC metadata {METADATA_KEY})"


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe ASCII: valid as gRPC metadata)."""
    return secrets.token_urlsafe(32)


# The process-wide token ("": none; servers then check nothing), installed once at start and
# used by every Server and channel that is not given one (services/runtime/grpc_util.py).
_token = ""


def configure_token(token: str) -> None:
    """Use `token` for every Server and channel of this process from now on (services read it
    from --cluster-token/--cluster-token-file at start; launchers from the file they made)."""
    global _token
    _token = token or ""


def cluster_token() -> str:
    """The process-wide cluster token ("" when none)."""
    return _token


def ensure_token() -> str:
    """The process-wide token, made (random) and installed first if there is none: for a
    launcher that starts services and then calls them itself (bidaw up, tests, chaos)."""
    if not _token:
        configure_token(new_token())
    return _token


def write_token_file(path: str, token: str | None = None, *, overwrite: bool = False) -> str:
    """Write `token` (a new one by default) to `path`, mode 0600 from the start (never readable
    by others, not even briefly); FileExistsError unless `overwrite`. Returns the token."""
    token = token or new_token()
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # an existing file overwritten keeps no looser mode
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(token + "\n")
    return token


def _sent(metadata) -> bytes:
    value = next((v for k, v in (metadata or ()) if k == METADATA_KEY), "")
    return value if isinstance(value, bytes) else str(value).encode()


def token_matches(metadata, expected: str) -> bool:
    return hmac.compare_digest(_sent(metadata), expected.encode())


# -- server side ----------------------------------------------------------------------------

def _refuse(_request, context):
    context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSAL)


# A refusal is a request-streaming handler whatever the method's kind: gRPC then runs it at once.
# For a unary request it would first wait, in a server thread and with no deadline, for the
# request message, so a stranger's calls that never send one held every thread of the server.
# On the wire the kinds are alike: the caller gets UNAUTHENTICATED either way.
_DENY = {False: grpc.stream_unary_rpc_method_handler, True: grpc.stream_stream_rpc_method_handler}


class TokenCheck(grpc.ServerInterceptor):
    """Refuse every call but the health probes' (OPEN_METHODS) unless it carries `token`."""

    def __init__(self, token: str):
        if not token:
            raise ValueError("TokenCheck needs a token")
        self._token = token

    def __repr__(self) -> str:
        return "TokenCheck(<hidden>)"

    def intercept_service(self, continuation, details):
        if details.method in OPEN_METHODS or \
                token_matches(details.invocation_metadata, self._token):
            return continuation(details)
        handler = continuation(details)
        # an unknown method (None): refused alike, nothing to probe
        return _DENY[bool(handler and handler.response_streaming)](
            _refuse, request_deserializer=None, response_serializer=None)


# -- client side ----------------------------------------------------------------------------

class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials",
                                                   "wait_for_ready", "compression")),
               grpc.ClientCallDetails):
    pass


def _with_token(metadata, token: str) -> list | None:
    """`metadata` plus the token, unless the caller set one itself (a test of a wrong one)."""
    items = list(metadata or ())
    if token and not any(k == METADATA_KEY for k, _ in items):
        items.append((METADATA_KEY, token))
    return items or None


class TokenSender(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token that `token()` returns at call time (so a channel made before the process
    read its token still sends it); the Call object is returned untouched."""

    def __init__(self, token):
        self._token = token

    def _intercept(self, continuation, details, request):
        details = _Details(details.method, details.timeout,
                           _with_token(details.metadata, self._token()), details.credentials,
                           details.wait_for_ready, getattr(details, "compression", None))
        return continuation(details, request)

    intercept_unary_unary = intercept_unary_stream = _intercept
    intercept_stream_unary = intercept_stream_stream = _intercept


def aio_senders(token) -> list:
    """TokenSender for grpc.aio channels: one interceptor object per call kind (aio files each
    object under a single kind)."""
    def details_for(details):
        # aio needs a sequence here, never None (a process with no token sends none)
        return grpc.aio.ClientCallDetails(details.method, details.timeout,
                                          _with_token(details.metadata, token()) or (),
                                          details.credentials, details.wait_for_ready)

    class UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
        async def intercept_unary_unary(self, continuation, details, request):
            return await continuation(details_for(details), request)

    class UnaryStream(grpc.aio.UnaryStreamClientInterceptor):
        async def intercept_unary_stream(self, continuation, details, request):
            return await continuation(details_for(details), request)

    class StreamUnary(grpc.aio.StreamUnaryClientInterceptor):
        async def intercept_stream_unary(self, continuation, details, request_iterator):
            return await continuation(details_for(details), request_iterator)

    class StreamStream(grpc.aio.StreamStreamClientInterceptor):
        async def intercept_stream_stream(self, continuation, details, request_iterator):
            return await continuation(details_for(details), request_iterator)

    return [UnaryUnary(), UnaryStream(), StreamUnary(), StreamStream()]
