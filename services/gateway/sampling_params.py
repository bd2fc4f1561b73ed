"""The sampling fields of a chat or completion body, as OpenAI (and vLLM's extensions) define
them. A knob the engine lacks is refused unless it is at its neutral value: an answer must
never silently mean something else than the client asked for."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from services.gateway.errors import bad_request
from services.gateway.fields import INT32_MAX, UINT64_MAX, integer, number, typed

MAX_BIAS = 100


@dataclass
class Sampling:
    """The sampling part of a parsed request (`protocol.Parsed` extends it)."""
    temperature: float = 1.0
    seed: int = 0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    repetition_penalty: float = 1.0  # vLLM's: 1 is off
    min_p: float = 0.0  # vLLM's: 0 is off
    json_object: bool = False  # JSON mode: the answer is one JSON object


def parse_sampling(body: dict, s: Sampling, vocab_size: int) -> None:
    """Check the body's sampling fields and set them on `s`."""
    s.temperature = number(body, "temperature", 0.0, 2.0, 1.0)
    # No seed: a fresh random one, so that two unseeded answers differ (OpenAI's behaviour).
    seed = integer(body, "seed", 0, UINT64_MAX)
    s.seed = secrets.randbits(64) if seed is None else seed
    s.top_p = number(body, "top_p", 0.0, 1.0, 1.0, low_open=True)  # vLLM: (0, 1]
    top_k = integer(body, "top_k", -1, INT32_MAX, 0)  # vLLM: -1 (or 0) is off
    s.top_k = max(top_k, 0)
    s.presence_penalty = number(body, "presence_penalty", -2.0, 2.0, 0.0)
    s.frequency_penalty = number(body, "frequency_penalty", -2.0, 2.0, 0.0)
    s.logit_bias = _logit_bias(body, vocab_size)
    # vLLM's ranges: the penalty in (0, 2] (over the prompt's and the answer's tokens), min_p
    # in [0, 1] (a fraction of the most likely token's probability)
    s.repetition_penalty = number(body, "repetition_penalty", 0.0, 2.0, 1.0, low_open=True)
    s.min_p = number(body, "min_p", 0.0, 1.0, 0.0)
    s.json_object = _json_mode(body)


def _logit_bias(body: dict, vocab_size: int) -> dict[int, float]:
    """{"token id": bias}: ids in the vocabulary, biases in [-100, 100]."""
    raw = typed(body, "logit_bias", (dict,), {})
    ids_below = vocab_size or INT32_MAX + 1
    bias = {}
    for key, value in raw.items():
        # (the length bound first: int() of a 5,000-digit string raises)
        if not (key.isascii() and key.isdigit() and len(key) <= 10) or int(key) >= ids_below:
            raise bad_request(f"logit_bias key {key[:20]!r} is not a token id in "
                              f"[0, {ids_below})", "logit_bias")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not -MAX_BIAS <= value <= MAX_BIAS:
            raise bad_request(f"logit_bias values must be numbers in [-{MAX_BIAS}, {MAX_BIAS}]",
                              "logit_bias")
        bias[int(key)] = float(value)
    return bias


def _json_mode(body: dict) -> bool:
    """OpenAI's response_format: text, or JSON mode ({"type": "json_object"}: one JSON object,
    the worker's grammar-constrained choice); a JSON schema is refused, never half-kept."""
    kind = (typed(body, "response_format", (dict,)) or {}).get("type", "text")
    if kind not in ("text", "json_object"):
        raise bad_request(f"response_format {str(kind)[:40]!r} is not supported: only \"text\" "
                          "and \"json_object\" (JSON mode; no schema)", "response_format")
    return kind == "json_object"
