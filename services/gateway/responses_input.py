"""A Responses API body (POST /v1/responses) -> the chat turn it asks for, with OpenAI's rules.

The context is `instructions` (a system message, never carried over from an earlier response,
as OpenAI says), then the conversation that `previous_response_id` ends (each stored response's
input and answer), then `input`. Text messages only: every other item or content type, and every
option this server lacks (a forced tool call, reasoning, JSON output, a verbosity), is refused
with a 400 naming it, as on the chat route. Accepted since they ask for nothing it lacks: tools
(never called: the answer is text, as on chat), `include` values
naming items it never produces (reasoning, tool calls, images), truncation "auto" (nothing is
ever cut: a conversation past the context is refused with or without it), cache retention.
`include` "message.output_text.logprobs" with `top_logprobs` gives the answer's logprobs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from services.gateway.config import GatewayConfig
from services.gateway.errors import ApiError, bad_request
from services.gateway.fields import UINT32_MAX, cache_salt, integer, typed
from services.gateway.logprobs import MAX_TOP_LOGPROBS
from services.gateway.prompt_size import check_prompt_size
from services.gateway.protocol import ROLES, Parsed, min_tokens, parse_ending
from services.gateway.request_fields import MAX_TOOLS, check_fields
from services.gateway.sampling_params import parse_sampling
from services.runtime.gen import common_pb2, scheduler_pb2

READ = {"model", "input", "instructions", "previous_response_id", "max_output_tokens",
        "temperature", "top_p", "stream", "store", "metadata", "text", "tools", "tool_choice",
        "truncation", "reasoning", "include", "top_logprobs",
        "seed", "top_k", "presence_penalty", "frequency_penalty", "logit_bias", "min_p",
        "repetition_penalty", "stop", "ignore_eos", "min_tokens",  # vLLM's extensions, as
        "cache_salt"}  # on the chat route (vLLM's ResponsesRequest takes them too)
IGNORED = {"user", "safety_identifier", "prompt_cache_key", "service_tier",
           "parallel_tool_calls", "max_tool_calls", "stream_options",
           "prompt_cache_retention",
           "client_metadata"}  # same answer here (the last: the Codex CLI's, with every turn)
NEUTRAL = {"background": (False,), "conversation": (), "prompt": ()}
LOGPROBS = "message.output_text.logprobs"
# OpenAI's other includables: extra fields of items this server never produces
NO_SUCH_ITEMS = {"reasoning.encrypted_content", "file_search_call.results",
                 "web_search_call.results", "web_search_call.action.sources",
                 "message.input_image.image_url", "computer_call_output.output.image_url",
                 "code_interpreter_call.outputs"}
TEXT_KEYS = {"format", "verbosity"}
TEXT_PARTS = {"input_text", "output_text", "text"}
MAX_METADATA = 16


@dataclass
class ResponseAsk:
    """What one POST /v1/responses asks: the turn, and what its response object echoes."""
    parsed: Parsed
    tenant: str = ""
    instructions: str | None = None
    previous_id: str | None = None
    own: list[tuple[str, str]] = field(default_factory=list)  # its input, as messages
    store: bool = True
    metadata: dict = field(default_factory=dict)
    max_output_tokens: int | None = None


def _text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("'content' must be a string or an array of text parts", where)
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS \
                or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise bad_request(f"content part type {str(kind)[:40]!r} is not supported (text "
                              "parts only: input_text, output_text)", f"{where}[{j}]")
        parts.append(part["text"])
    return "".join(parts)


def _input(body: dict) -> list[tuple[str, str]]:
    raw = body.get("input")
    if isinstance(raw, str) and raw:
        return [("user", raw)]
    if not isinstance(raw, list) or not raw:
        raise bad_request("'input' must be a non-empty string or array of messages", "input")
    out = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request("each input item must be an object", where)
        if item.get("type", "message") != "message":
            raise bad_request(f"input items of type {str(item.get('type'))[:40]!r} are not "
                              "supported (messages only: no tools, files or images)",
                              where + ".type")
        role = item.get("role")
        if role not in ROLES:
            raise bad_request(f"role {str(role)[:40]!r} is not supported (system, developer, "
                              "user, assistant)", where + ".role")
        out.append((ROLES[role], _text(item.get("content"), where + ".content")))
    return out


def _tools(tools) -> None:
    """Tools of any type are accepted and left unused, as on chat: the answer is text, with no
    tool calls (the Codex CLI sends its function, namespace and web_search tools with every
    turn, and cannot be told not to)."""
    if tools is None:
        return
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise bad_request(f"'tools' must be an array of at most {MAX_TOOLS} tools", "tools")
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str) or (kind == "function"
                                         and not isinstance(tool.get("name"), str)):
            raise bad_request("each tool must be an object with a 'type' (a function tool: "
                              "{\"type\": \"function\", \"name\": ...})", f"tools[{i}]")


def _refuse_options(body: dict) -> None:
    _tools(body.get("tools"))
    if body.get("tool_choice") not in (None, "none", "auto"):
        raise bad_request("'tool_choice' must be null, \"none\" or \"auto\": this server "
                          "never calls a tool (tools are accepted, the answer is text)",
                          "tool_choice")
    if body.get("truncation") not in (None, "disabled", "auto"):
        raise bad_request("truncation must be \"disabled\" or \"auto\" (nothing is ever cut: "
                          "a conversation past the context is refused)", "truncation")
    if body.get("reasoning") not in (None, {}) and typed(body, "reasoning", (dict,)).get(
            "effort") not in (None, "none"):
        raise bad_request("this model does not reason: reasoning.effort must be null or "
                          "\"none\" (reasoning.summary is accepted, and no summary comes)",
                          "reasoning")


def _json_mode(body: dict) -> bool:
    """`text`: its keys known, no verbosity but the default, and a format of text or JSON mode
    (json_object: True)."""
    text = typed(body, "text", (dict,), {})
    for key in text:
        if key not in TEXT_KEYS:
            raise ApiError(400, f"Unrecognized request argument supplied: text.{key[:60]}",
                           f"text.{key[:60]}", "unknown_parameter")
    if text.get("verbosity") not in (None, "medium"):  # medium: OpenAI's default
        raise bad_request("this model has no verbosity setting: only text.verbosity null or "
                          "\"medium\" (the default) is supported", "text.verbosity")
    fmt = typed(text, "format", (dict,), {}, "text.format")
    if fmt.get("type", "text") not in ("text", "json_object"):
        raise bad_request("text.format must be text or json_object (JSON mode; no schema)",
                          "text.format")
    return fmt.get("type") == "json_object"


def _logprobs(body: dict, parsed: Parsed) -> None:
    """include "message.output_text.logprobs" asks for the answer's logprobs, `top_logprobs`
    (0..20) for that many alternatives per token, as on chat."""
    include = typed(body, "include", (list,), [])
    for i, name in enumerate(include):
        if name != LOGPROBS and name not in NO_SUCH_ITEMS:
            raise bad_request(f"include value {str(name)[:60]!r} is not supported (only "
                              f"{LOGPROBS!r}, or the fields of items this server never "
                              "produces: reasoning, tool calls, images)", f"include[{i}]")
    parsed.logprobs = LOGPROBS in include
    parsed.top_logprobs = integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0)
    if parsed.top_logprobs and not parsed.logprobs:
        raise bad_request(f"top_logprobs needs 'include': [{LOGPROBS!r}]", "top_logprobs")


def _metadata(body: dict) -> dict:
    meta = typed(body, "metadata", (dict,), {})
    if len(meta) > MAX_METADATA or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in meta.items()):
        raise bad_request(f"'metadata' holds at most {MAX_METADATA} pairs of strings: keys of "
                          "up to 64 characters, values of up to 512", "metadata")
    return meta


def parse_response_request(body: dict, config: GatewayConfig, tenant: str) -> ResponseAsk:
    """Everything but the history (with_history adds it, from the stored responses)."""
    check_fields(body, READ | IGNORED, NEUTRAL)
    _refuse_options(body)
    json_mode = _json_mode(body)
    ask = ResponseAsk(Parsed(), tenant, own=_input(body), metadata=_metadata(body))
    ask.instructions = typed(body, "instructions", (str,)) or None
    ask.previous_id = typed(body, "previous_response_id", (str,)) or None
    ask.store = typed(body, "store", (bool,), True)
    ask.max_output_tokens = integer(body, "max_output_tokens", 1, UINT32_MAX)
    if config.max_model_len and (ask.max_output_tokens or 0) > config.max_model_len:
        raise bad_request(f"'max_output_tokens' is {ask.max_output_tokens}, more than the "
                          f"model's context of {config.max_model_len} tokens",
                          "max_output_tokens")
    # Absent: the worker's default, as chat's (1024; 0 to the context's end); the Agents SDK
    # takes a response cut short ("incomplete") for an error
    ask.parsed.max_tokens = ask.max_output_tokens or 0
    ask.parsed.min_tokens = min_tokens(body, ask.max_output_tokens or 0, config.max_model_len,
                                       limit="max_output_tokens")
    parse_sampling(body, ask.parsed, config.vocab_size)
    ask.parsed.json_object = json_mode
    parse_ending(body, ask.parsed)
    _logprobs(body, ask.parsed)
    ask.parsed.stream = typed(body, "stream", (bool,), False)
    ask.parsed.cache_salt = cache_salt(body)
    return ask


def with_history(ask: ResponseAsk, found: scheduler_pb2.GetResponseReply | None,
                 config: GatewayConfig) -> None:
    """The turn's messages: instructions, the conversation previous_response_id ends (`found`,
    the scheduler's answer; None without one), then the input; 404 if a response is missing."""
    history = []
    if found is not None and found.missing_id:
        missing = found.missing_id[:80]
        earlier = "" if found.missing_id == ask.previous_id else (
            f" (an earlier response of the conversation '{ask.previous_id[:80]}' ends; "
            "deleted or expired)")
        raise ApiError(404, f"Previous response with id '{missing}' not found.{earlier}",
                       "previous_response_id", "previous_response_not_found")
    for record in found.responses if found is not None else ():
        history += [*((m.role, m.content) for m in record.messages),
                    ("assistant", record.output)]
    system = [("system", ask.instructions)] if ask.instructions else []
    ask.parsed.messages = system + history + ask.own
    try:
        check_prompt_size(ask.parsed, True, config.max_prompt_bytes, config.max_model_len)
    except ApiError as exc:
        raise ApiError(exc.status, exc.message.replace("'messages'", "'input'").replace(
            "the messages", "the input"), "input", exc.code) from None


def stored(ask: ResponseAsk, response_id: str, output: str, body: dict,
           input_items: list[dict]) -> scheduler_pb2.StoredResponse:
    """What the scheduler keeps of a response (compact JSON: ensure_ascii would grow text
    outside ASCII up to 3x)."""
    dump = lambda value: json.dumps(value, ensure_ascii=False,  # noqa: E731
                                    separators=(",", ":")).encode()
    return scheduler_pb2.StoredResponse(
        tenant=ask.tenant, id=response_id, previous_id=ask.previous_id or "",
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in ask.own],
        output=output, body=dump(body), input_items=dump(input_items))
