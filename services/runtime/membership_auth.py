"""Reading the shared cluster token from a service's config (--cluster-token or, better, env
BIDAW_<SVC>_CLUSTER_TOKEN or --cluster-token-file, which `ps` does not show). The token guards
every internal RPC (services/runtime/cluster_auth.py); Register/Deregister are among them, so a pod
that merely reaches the scheduler cannot add itself as a worker nor remove real members.
"""
from __future__ import annotations

from services.runtime.cluster_auth import METADATA_KEY, cluster_token

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
    # gRPC metadata values are printable ASCII; say so here rather than fail on every call.
    if token and not (token.isascii() and token.isprintable() and token == token.strip()):
        raise ValueError(f"{flag}: the token must be printable ASCII without surrounding spaces")
    return token


def config_token(config) -> str:
    """resolve_token for a service config, read once per process (the file is not re-read on
    every call); ValueError naming the flag."""
    key = (getattr(config, "cluster_token", "") or "",
           getattr(config, "cluster_token_file", "") or "")
    if key not in _resolved:
        _resolved[key] = resolve_token(*key)
    return _resolved[key]


def require_token(config, service: str) -> str:
    """The service's token; ValueError naming the flags when there is none and the config did
    not opt out with --insecure-no-auth (nothing is left open by accident)."""
    token = config_token(config)
    if not token and not getattr(config, "insecure_no_auth", False):
        raise ValueError(
            f"no cluster token: every internal gRPC call is authenticated; give "
            f"--cluster-token-file FILE (`bidaw token --out FILE` makes one), --cluster-token "
            f"or env BIDAW_{service.upper()}_CLUSTER_TOKEN(_FILE); or --insecure-no-auth true "
            f"to serve without authentication on a trusted network")
    return token


def server_token(config):
    """What a service's Server checks: its config's token, else the process-wide one."""
    return config_token(config) or cluster_token()


def call_metadata(token: str) -> tuple[tuple[str, str], ...] | None:
    """Explicit metadata for a call with `token` (channels add the process-wide one anyway)."""
    return ((METADATA_KEY, token),) if token else None
