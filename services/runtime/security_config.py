"""The TLS and cluster-token settings every gRPC service shares (store, worker, scheduler; the
gateway dials only, so it has the token part): base dataclasses, so their flags (--tls-*,
--cluster-token*, --insecure-no-auth) and env vars read the same."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClusterTokenConfig:
    cluster_token: str = field(default="", repr=False, metadata={  # never in a repr or log
        "help": "the cluster secret: every internal gRPC call must carry it (servers refuse "
                "others with UNAUTHENTICATED) and this service sends it on its own calls; "
                "prefer --cluster-token-file or the env var so it stays out of `ps`; "
                "`bidaw token --out FILE` makes one"})
    cluster_token_file: str = field(default="", metadata={
        "help": "file holding --cluster-token (surrounding whitespace ignored)"})
    insecure_no_auth: bool = field(default=False, metadata={
        "help": "run without a cluster token: internal gRPC open to anyone who reaches the "
                "port (only for a trusted, isolated network; otherwise refused at start)"})


@dataclass
class SecurityConfig(ClusterTokenConfig):
    tls_cert: str = field(default="", metadata={
        "help": "PEM certificate: serve gRPC over TLS and present it to the services it dials "
                "(empty: plaintext)"})
    tls_key: str = field(default="", metadata={"help": "PEM private key of --tls-cert"})
    tls_ca: str = field(default="", metadata={
        "help": "PEM CA: trust servers it signed and, serving, require client certificates "
                "it signed (mTLS)"})
