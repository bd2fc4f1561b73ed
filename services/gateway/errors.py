"""OpenAI-style errors: {"error": {"message", "type", "param", "code"}} with the right status."""
from __future__ import annotations

import json

import grpc
from aiohttp import web

# status -> the `type` OpenAI uses for it
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 408: "invalid_request_error",
          413: "invalid_request_error", 429: "rate_limit_error",
          500: "server_error", 503: "service_unavailable", 504: "timeout_error"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "error"),
                          "param": self.param, "code": self.code}}

    def log_note(self) -> str:
        """What the access log says of it: its code and field, never its message (which may
        quote the client's input), the field escaped (its name may be the client's own)."""
        field = f", {ascii(self.param)[1:-1]}" if self.param else ""
        return f" ({self.code or self.status}{field})"

    def response(self) -> web.Response:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after else None
        response = web.Response(status=self.status, text=json.dumps(self.body()),
                                content_type="application/json", headers=headers)
        if self.status == 408:  # the rest of the body may still come: not a request boundary
            response.force_close()
        return response


# OpenAI's and vLLM's opening words for a prompt the context cannot hold (the worker's too:
# compute_worker/prompt.py), which clients match; OpenAI's code for it
CONTEXT_EXCEEDED = "This model's maximum context length is"
CONTEXT_CODE = "context_length_exceeded"


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param, "invalid_value" if param else "invalid_request")


def from_grpc(exc: grpc.RpcError, retry_after: int) -> ApiError:
    """The HTTP face of a scheduler error; its message is passed on for client errors only."""
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        if details.startswith(CONTEXT_EXCEEDED):
            return ApiError(400, details, None, CONTEXT_CODE)
        # a length the scheduler's --max-tokens-limit refuses: the field is named first
        param = next((f for f in ("max_tokens", "min_tokens") if details.startswith(f + " ")),
                     None)
        return ApiError(400, details, param, "invalid_value" if param else "invalid_request")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ApiError(429, f"the scheduler is full: {details}", None, "overloaded",
                        retry_after)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                grpc.StatusCode.ABORTED):  # (a scheduler stopping, or cut off mid-call)
        return ApiError(503, "the serving backend is unavailable; retry later", None,
                        "unavailable", retry_after)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        # the deployment's own misconfiguration, not the client's: its token is never named
        return ApiError(503, "the serving backend refused the gateway (its cluster token or "
                        "certificate is not the deployment's); the operator must fix it", None,
                        "backend_refused", retry_after)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ApiError(504, "the turn did not finish within the gateway's deadline", None,
                        "timeout")
    if code == grpc.StatusCode.NOT_FOUND:
        return ApiError(404, details, None, "not_found")
    return ApiError(500, f"backend error {code.name}", None, "internal_error")
