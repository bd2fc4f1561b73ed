"""Which fields a chat or completion body may carry. Each field is read (protocol.py and
sampling_params.py give it its meaning, or refuse it), accepted as metadata that cannot change
the answer, accepted only at a value that asks for nothing (a feature this server lacks, left
off), or refused with a 400 naming it: as OpenAI does, an unknown field is an error, never
silently dropped. Message objects are held to the same rule."""
from __future__ import annotations

import json

from services.gateway.errors import ApiError

# read and honoured (or refused by value) by protocol.py / sampling_params.py
_SHARED = {"model", "max_tokens", "max_completion_tokens", "temperature", "seed", "top_p",
           "presence_penalty", "frequency_penalty", "logit_bias", "response_format", "stop",
           "stream", "stream_options", "n", "logprobs", "user",
           "conversation_id",  # vLLM's multi-turn proxy (benchmark --send-conversation-id)
           "cache_salt",  # vLLM's: KV shared only among requests with the same salt
           "top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens",  # vLLM's
           "add_special_tokens",  # vLLM's too: the tokenizer's BOS before the prompt or not
           "return_cached_tokens_details"}  # SGLang's: the tier the cached tokens came from
CHAT_READ = _SHARED | {"messages", "tools", "continue_final_message", "add_generation_prompt",
                       "top_logprobs", "chat_template_kwargs"}
COMPLETION_READ = _SHARED | {"prompt", "echo", "suffix", "best_of"}
# OpenAI's metadata: stored, billed or routed differently there, the same answer here
CHAT_IGNORED = {"metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
                "parallel_tool_calls"}  # (no tool is ever called: nothing in parallel)
MAX_TOOLS = 128  # OpenAI's bound
# fields accepted only at these values (null always); others ask for what this server lacks
_VLLM_NEUTRAL = {"skip_special_tokens": (True,), "spaces_between_special_tokens": (True,),
                 "include_stop_str_in_output": (False,),
                 "stop_token_ids": ([],), "use_beam_search": (False,)}
CHAT_NEUTRAL = {**_VLLM_NEUTRAL, "tool_choice": ("none", "auto"), "functions": ([],),
                "function_call": ("none",), "modalities": (["text"],), "audio": (),
                "prediction": (), "web_search_options": (), "reasoning_effort": ("none",),
                "verbosity": ("medium",), "echo": (False,)}
COMPLETION_NEUTRAL = _VLLM_NEUTRAL
# include_obfuscation: no padding is ever added; continuous_usage_stats: vLLM's
STREAM_OPTIONS = {"include_usage", "include_obfuscation", "continuous_usage_stats"}
# message keys besides role and content: what an OpenAI or vLLM answer carries when it is
# appended to the history as it came, accepted while empty
MESSAGE_NEUTRAL = {"tool_calls": ([],), "function_call": (), "tool_call_id": (),
                   "refusal": ("",), "audio": (), "annotations": ([],),
                   "reasoning_content": ("",)}
_WHY = {"tool_calls": "tool calls are not supported", "function_call": "function calling is "
        "not supported", "functions": "function calling is not supported",
        "tool_choice": "this server never calls a tool (tools are accepted, the answer is text)",
        "modalities": "only text output is supported", "audio": "audio output is not "
        "supported", "reasoning_effort": "this model does not reason"}


def _unsupported(name: str, param: str, allowed: tuple) -> ApiError:
    shown = " or ".join(json.dumps(v) for v in allowed)
    why = _WHY.get(name, "it is not supported by this server")
    return ApiError(400, f"'{param}' is not supported: {why} (only null"
                    f"{' or ' + shown if shown else ''} is accepted)", param,
                    "unsupported_parameter")


def _check(obj: dict, read: set, neutral: dict, prefix: str = "") -> None:
    for name, value in obj.items():
        if name in read:
            continue
        param = prefix + name[:60]
        if name not in neutral:
            raise ApiError(400, f"Unrecognized request argument supplied: {param}", param,
                           "unknown_parameter")
        if value is not None and not any(type(value) is type(v) and value == v
                                         for v in neutral[name]):  # JSON false is not 0
            raise _unsupported(name, param, neutral[name])


def check_fields(obj: dict, read: set, neutral: dict) -> None:
    """400 naming the first field of `obj` neither read nor at a neutral value (Responses API)."""
    _check(obj, read, neutral)


def check_chat_fields(body: dict) -> None:
    """400 naming the first chat field or message key this server would otherwise ignore
    (tools first: what tool_choice may say depends on them)."""
    _tools(body.get("tools"))
    _check(body, CHAT_READ | CHAT_IGNORED, CHAT_NEUTRAL)
    _stream_options(body)
    check_message_fields(body)


def _tools(tools) -> None:
    """Function tools are accepted and left unused, as a model that never calls one would
    (Open WebUI sends its built-in tools with every turn): the answer is text, with no tool
    calls, so only tool_choice "none" or "auto" can be served."""
    if tools is None:
        return
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise ApiError(400, f"'tools' must be an array of at most {MAX_TOOLS} tools", "tools",
                       "invalid_value")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function" or \
                not isinstance(function.get("name"), str):
            raise ApiError(400, "each tool must be {\"type\": \"function\", \"function\": "
                           "{\"name\": ...}}", f"tools[{i}]", "invalid_value")


def check_message_fields(body: dict) -> None:
    """400 naming the first message key this server would otherwise ignore."""
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(message, dict):
            _check(message, {"role", "content", "name"}, MESSAGE_NEUTRAL, f"messages[{i}].")


def check_completion_fields(body: dict) -> None:
    _check(body, COMPLETION_READ, COMPLETION_NEUTRAL)
    _stream_options(body)


def _stream_options(body: dict) -> None:
    options = body.get("stream_options")
    if isinstance(options, dict):
        _check(options, STREAM_OPTIONS, {}, "stream_options.")
