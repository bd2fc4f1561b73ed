"""What the scheduler refuses before acting on it: a malformed turn, a malformed member."""
from __future__ import annotations

from services.runtime.gen import common_pb2, scheduler_pb2
from services.runtime.limits import MAX_SESSION_ID_BYTES
from services.runtime.turn_bounds import ROLES, tenant_problem, turn_bounds_problem

from scheduler.member_address import address_problem

MEMBER_KINDS = (scheduler_pb2.MEMBER_KIND_WORKER, scheduler_pb2.MEMBER_KIND_STORE)
MAX_TOP_LOGPROBS = 20  # OpenAI's and vLLM's most (the gateway's and the worker's too)
_TOO_LONG = f"session_id is longer than {MAX_SESSION_ID_BYTES} bytes"


def turn_problem(turn: common_pb2.TurnRequest, max_tokens_limit: int) -> str | None:
    """The reason a turn is malformed, or None."""
    if len(turn.session_id.encode()) > MAX_SESSION_ID_BYTES:
        return _TOO_LONG
    if len(turn.cache_salt.encode()) > MAX_SESSION_ID_BYTES:
        return f"cache_salt is longer than {MAX_SESSION_ID_BYTES} bytes"
    if turn.messages and turn.prompt_token_ids:
        return "give messages or prompt_token_ids, not both"
    if not turn.messages and not turn.prompt_token_ids and not turn.raw_prompt:
        return "the prompt is empty: no messages, prompt_token_ids or raw_prompt"
    for m in turn.messages:
        if m.role not in ROLES:
            return f"message role {m.role!r} is not one of {', '.join(ROLES)}"
    if turn.messages and not any(m.content for m in turn.messages):
        return "the prompt is empty: every message has empty content"
    bounds = turn_bounds_problem(turn)
    if bounds is not None:
        return bounds
    for name in ("max_tokens", "min_tokens"):  # (min_tokens raises an unset max_tokens)
        if max_tokens_limit and getattr(turn, name) > max_tokens_limit:
            return f"{name} {getattr(turn, name)} exceeds the limit {max_tokens_limit}"
    if not 0.0 <= turn.temperature <= 2.0:
        return f"temperature {turn.temperature} is outside [0, 2]"
    return _sampling_problem(turn)


def _sampling_problem(turn: common_pb2.TurnRequest) -> str | None:
    """vLLM's ranges (NaN fails every one): repetition_penalty in (0, 2] (0 is unset: off),
    min_p in [0, 1], top_logprobs up to 20; prompt_only (no answer) with no answer length."""
    if not 0.0 <= turn.repetition_penalty <= 2.0:
        return f"repetition_penalty {turn.repetition_penalty:g} is outside (0, 2]"
    if not 0.0 <= turn.min_p <= 1.0:
        return f"min_p {turn.min_p:g} is outside [0, 1]"
    if turn.top_logprobs > MAX_TOP_LOGPROBS:
        return f"top_logprobs {turn.top_logprobs} is above {MAX_TOP_LOGPROBS}"
    if turn.prompt_only and (turn.max_tokens or turn.min_tokens):
        return "prompt_only asks for no answer: max_tokens and min_tokens must be 0"
    return None


def session_problem(request: scheduler_pb2.EndSessionRequest |
                    scheduler_pb2.PrepareSessionRequest) -> str | None:
    """The reason an EndSession or a PrepareSession names no session of its tenant, or None."""
    problem = tenant_problem(request.tenant)
    if problem:
        return problem
    if not request.session_id:
        return "session_id is empty"
    if len(request.session_id.encode()) > MAX_SESSION_ID_BYTES:
        return _TOO_LONG
    if request.tenant and not request.session_id.startswith(request.tenant + "/"):
        return f"session_id is not in tenant {request.tenant}'s namespace ({request.tenant}/...)"
    return None


def member_problem(kind: int, address: str) -> str | None:
    """The reason a Register/Deregister names no acceptable member, or None. The scheduler will
    dial the address, so it must be a plain host:port and no more."""
    if kind not in MEMBER_KINDS:
        return "kind must be WORKER or STORE"
    return address_problem(address)


def response_problem(tenant: str, response_id: str, previous_id: str = "") -> str | None:
    """The reason a stored response's tenant or ids (the Responses API's) are unacceptable."""
    problem = tenant_problem(tenant)
    if problem:
        return problem
    if not response_id:
        return "the response id is empty"
    for name in (response_id, previous_id):
        if len(name.encode()) > MAX_SESSION_ID_BYTES or not name.isprintable():
            return f"a response id must be printable and at most {MAX_SESSION_ID_BYTES} bytes"
    return None
