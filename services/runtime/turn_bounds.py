"""The ranges of a TurnRequest's integers, tenant and stops, checked by every service that takes
one (the scheduler, and the worker, which can be called directly).

The integer fields are 64-bit on the wire (protos/bidaw/v1/common.proto), so a value past 32
bits arrives whole and is refused here by name; as int32/uint32 the parser would have cut it to
its low bits and run the turn with another number.
"""
from __future__ import annotations

import re

from services.runtime.gen import common_pb2
from services.runtime.limits import INT32_MAX, UINT32_MAX, first_outside

ROLES = ("system", "user", "assistant")  # a chat turn's messages (the gateway maps the rest)
MAX_STOPS = 16  # OpenAI's API takes up to 4; the gateway up to this many
MAX_NAME_BYTES = 256  # a message's participant name
MAX_TEMPLATE_KWARGS_BYTES = 16 << 10  # chat_template_kwargs as JSON
# chat_template_kwargs the server sets itself (its variables, the template's functions and
# Jinja's own: a kwarg would hide them), or that ask for what it lacks (tools)
TEMPLATE_RESERVED = ("messages", "add_generation_prompt", "bos_token", "eos_token", "tools",
                     "documents", "raise_exception", "strftime_now", "range", "dict", "lipsum",
                     "cycler", "joiner", "namespace")
MAX_TENANT = 64
TENANT_RE = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % MAX_TENANT)


def tenant_problem(tenant: str) -> str | None:
    """Why `tenant` (empty: none) is not a tenant name the gateway could have sent, or None."""
    if tenant and not TENANT_RE.fullmatch(tenant):
        return f"tenant must match {TENANT_RE.pattern}"
    return None


def turn_bounds_problem(turn: common_pb2.TurnRequest) -> str | None:
    """The first field of `turn` outside its range, said by name; None if all are in range."""
    problem = tenant_problem(turn.tenant)
    if problem:
        return problem
    bad = first_outside(turn.prompt_token_ids, 0, INT32_MAX)
    if bad is not None:
        return f"prompt_token_ids holds {bad}, outside [0, {INT32_MAX}]"
    if turn.max_tokens > UINT32_MAX:
        return f"max_tokens {turn.max_tokens} is above {UINT32_MAX}"
    if turn.top_k > UINT32_MAX:
        return f"top_k {turn.top_k} is above {UINT32_MAX}"
    if turn.min_tokens > UINT32_MAX:
        return f"min_tokens {turn.min_tokens} is above {UINT32_MAX}"
    if turn.max_tokens and turn.min_tokens > turn.max_tokens:
        return f"min_tokens {turn.min_tokens} is above max_tokens {turn.max_tokens}"
    bad = first_outside(list(turn.logit_bias), 0, INT32_MAX)
    if bad is not None:
        return f"logit_bias token id {bad} is outside [0, {INT32_MAX}]"
    if len(turn.stop) > MAX_STOPS:
        return f"stop holds {len(turn.stop)} strings; at most {MAX_STOPS}"
    if any(len(m.name.encode()) > MAX_NAME_BYTES for m in turn.messages):
        return f"a message's name is longer than {MAX_NAME_BYTES} bytes"
    if len(turn.chat_template_kwargs.encode()) > MAX_TEMPLATE_KWARGS_BYTES:
        return f"chat_template_kwargs is longer than {MAX_TEMPLATE_KWARGS_BYTES} bytes"
    return None
