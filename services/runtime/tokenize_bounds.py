"""What a TokenizeRequest may ask, checked the same way by the scheduler and the worker (the
worker can be called directly); the vocabulary itself only the worker knows."""
from __future__ import annotations

from services.runtime.gen import common_pb2
from services.runtime.limits import INT32_MAX, first_outside
from services.runtime.turn_bounds import ROLES

NEEDS = {common_pb2.TOKENIZE_OP_TEXT: "prompt", common_pb2.TOKENIZE_OP_MESSAGES: "messages",
         common_pb2.TOKENIZE_OP_DETOKENIZE: "token_ids"}


def tokenize_problem(request: common_pb2.TokenizeRequest) -> str | None:
    """Why the request cannot be served, naming the field; None when it can."""
    op = request.op
    if op not in common_pb2.TokenizeOp.values() or op == common_pb2.TOKENIZE_OP_UNSPECIFIED:
        return f"op {op} is not a TokenizeOp"
    given = [name for name in ("prompt", "messages", "token_ids") if getattr(request, name)]
    extra = [name for name in given if name != NEEDS.get(op)]
    if extra:
        return f"{extra[0]} does not go with op {common_pb2.TokenizeOp.Name(op)}"
    if op == common_pb2.TOKENIZE_OP_MESSAGES:
        if not request.messages:
            return "messages is empty"
        role = next((m.role for m in request.messages if m.role not in ROLES), None)
        if role is not None:
            return f"messages: unknown role {role[:40]!r} ({', '.join(ROLES)})"
    bad = first_outside(request.token_ids, 0, INT32_MAX)
    if bad is not None:
        return f"token_ids: {bad} is not a token id"
    return None
