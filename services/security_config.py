"""The TLS and cluster-token settings every gRPC service shares (store, worker, scheduler): one
base dataclass, so their flags (--tls-*, --cluster-token*) and env vars read the same."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SecurityConfig:
    tls_cert: str = field(default="", metadata={
        "help": "PEM certificate: serve gRPC over TLS and present it to the services it dials "
                "(empty: plaintext)"})
    tls_key: str = field(default="", metadata={"help": "PEM private key of --tls-cert"})
    tls_ca: str = field(default="", metadata={
        "help": "PEM CA: trust servers it signed and, serving, require client certificates "
                "it signed (mTLS)"})
    cluster_token: str = field(default="", repr=False, metadata={  # never in a repr or log
        "help": "membership secret: the scheduler requires it on Register/Deregister (empty: "
                "anyone may), members send it; prefer the env var or --cluster-token-file so "
                "it stays out of `ps`"})
    cluster_token_file: str = field(default="", metadata={
        "help": "file holding --cluster-token (surrounding whitespace ignored)"})
