"""The gateway's configuration (flags, env BIDAW_GATEWAY_*, or YAML)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GatewayConfig:
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
        "help": "chat/completion turns let through to the scheduler at once; more wait in "
                "the gateway's fair FIFO (--max-waiting)"})
    max_waiting: int = field(default=1024, metadata={
        "help": "turns waiting for a slot, all tenants together, served FIFO per tenant and "
                "round-robin across tenants; more get 429 at once (0: no waiting)"})
    tenant_max_waiting: int = field(default=0, metadata={
        "help": "turns one tenant may have waiting (0: --max-waiting)"})
    max_queue_wait_s: float = field(default=120.0, metadata={
        "help": "longest wait for a slot (at most --request-timeout-s); a turn the measured "
                "drain rate says would wait longer gets 429 at once, one still waiting then "
                "gets 429"})
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
    retry_after_s: int = field(default=1, metadata={
        "help": "Retry-After on 503, and on 429 before any turn finished (later 429s from "
                "the queue estimate it from the measured drain rate)"})
    request_timeout_s: float = field(default=600.0, metadata={
        "help": "deadline of one turn at the scheduler"})
    tls_cert: str = field(default="", metadata={
        "help": "PEM client certificate presented to the scheduler (mTLS)"})
    tls_key: str = field(default="", metadata={"help": "PEM private key of --tls-cert"})
    tls_ca: str = field(default="", metadata={
        "help": "PEM CA that signed the scheduler's certificate: dial it over TLS (empty: "
                "plaintext)"})

    def __post_init__(self):
        # admission limits: a bad value is refused here, naming its flag, not deep in a core
        for name in ("max_waiting", "tenant_max_waiting", "tenant_rate", "tenant_burst",
                     "tenant_max_in_flight"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        if self.max_in_flight < 1:
            raise ValueError("--max-in-flight must be >= 1")
        if not self.max_queue_wait_s > 0:  # also refuses NaN
            raise ValueError("--max-queue-wait-s must be > 0")
