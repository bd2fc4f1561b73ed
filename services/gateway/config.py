"""The gateway's configuration (flags, env BIDAW_GATEWAY_*, or YAML)."""
from __future__ import annotations

from dataclasses import dataclass, field

from services.security_config import ClusterTokenConfig


@dataclass
class GatewayConfig(ClusterTokenConfig):
    listen: str = field(default="127.0.0.1:8000", metadata={"help": "HTTP address to serve on"})
    scheduler: str = field(default="127.0.0.1:50052", metadata={"help": "scheduler address"})
    served_model: str = field(default="smollm2-135m", metadata={
        "help": "model id reported by /v1/models and accepted in requests"})
    api_keys: str = field(default="", metadata={
        "help": "API keys as tenant:key pairs, comma separated; prefer the env var "
        "BIDAW_GATEWAY_API_KEYS or --api-keys-file so keys stay out of `ps`"})
    api_keys_file: str = field(default="", metadata={
        "help": "file of API keys: one `tenant key` or `tenant:key` per line, # comments"})
    allow_open: bool = field(default=False, metadata={
        "help": "serve without API keys on a non-loopback address (otherwise refused)"})
    max_in_flight: int = field(default=256, metadata={
        "help": "chat/completion requests served at once; more are refused with 429"})
    tenant_rate: float = field(default=0.0, metadata={
        "help": "chat/completion requests per second per tenant (token bucket); more get 429 "
                "with Retry-After (0: no limit)"})
    tenant_burst: int = field(default=0, metadata={
        "help": "requests a tenant may send at once above its rate (0: one second's worth)"})
    tenant_max_in_flight: int = field(default=0, metadata={
        "help": "chat/completion requests one tenant may have in flight; more get 429 "
                "(0: no limit beyond --max-in-flight)"})
    max_body_bytes: int = field(default=4 << 20, metadata={
        "help": "largest request body; larger ones get 413"})
    max_session_id: int = field(default=128, metadata={"help": "longest session id (bytes)"})
    retry_after_s: int = field(default=1, metadata={"help": "Retry-After on 429 and 503"})
    request_timeout_s: float = field(default=600.0, metadata={
        "help": "deadline of one turn at the scheduler"})
    tls_cert: str = field(default="", metadata={
        "help": "PEM client certificate presented to the scheduler (mTLS)"})
    tls_key: str = field(default="", metadata={"help": "PEM private key of --tls-cert"})
    tls_ca: str = field(default="", metadata={
        "help": "PEM CA that signed the scheduler's certificate: dial it over TLS (empty: "
                "plaintext)"})
