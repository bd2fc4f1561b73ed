"""OpenAI request bodies -> the fields of a bidaw.v1.TurnRequest, with OpenAI's validation rules.

Every field either means what OpenAI (or vLLM, for its extensions) says it means or is refused
with a 400 naming it: features whose absence would change the answer (n > 1, tools, suffix,
JSON mode) are never silently dropped; which fields may appear at all: request_fields.py.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from services.gateway.completion_prompts import MAX_PROMPTS, completion_prompts
from services.gateway.config import GatewayConfig
from services.gateway.errors import ApiError, bad_request
from services.gateway.fields import UINT32_MAX, cache_salt, integer, typed
from services.gateway.logprobs import MAX_TOP_LOGPROBS
from services.gateway.request_fields import check_chat_fields, check_completion_fields
from services.gateway.sampling_params import Sampling, parse_sampling
from services.runtime.turn_bounds import (MAX_NAME_BYTES, MAX_STOPS, MAX_TEMPLATE_KWARGS_BYTES,
                                          TEMPLATE_RESERVED)

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass
class Parsed(Sampling):
    """What one HTTP request asks of one turn."""
    messages: list[tuple[str, str]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # each message's `name` ("": none)
    template_kwargs: str = ""  # vLLM's chat_template_kwargs, as JSON ("": none)
    prompt_token_ids: list[int] = field(default_factory=list)
    raw_prompt: str = ""  # a completion's text prompt: no chat template
    continue_final_message: bool = False
    no_generation_prompt: bool = False
    max_tokens: int = 0  # 0: the worker's default
    min_tokens: int = 0  # 0: off
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # vLLM's continuous_usage_stats: usage in every chunk
    conversation_id: str = ""  # vLLM's multi-turn proxy's session key (a body field)
    cache_salt: str = ""  # vLLM's: KV shared only among requests with the same salt
    add_special_tokens: bool | None = None  # vLLM's; None: the endpoint's default
    cached_details: bool = False  # SGLang's return_cached_tokens_details
    n: int = 1  # answers to the prompt (choices), each its own turn (completion_batch.py)
    logprobs: bool = False  # each token's logprob in the answer
    top_logprobs: int = 0  # and this many most likely alternatives per token
    echo: bool = False  # completions: the answer's text (and logprobs) after the prompt's
    prompt_logprobs: bool = False  # the worker sends the prompt's logprobs (and token bytes)
    prompt_only: bool = False  # max_tokens 0 (with echo): no answer, the prompt scored


def check_model(body: dict, served: list[str]) -> str:
    """The name reported in the answer (the first served name) if `model` is any of them."""
    model = typed(body, "model", (str,), served[0])
    if model not in served:
        raise ApiError(404, f"The model `{model[:200]}` does not exist. This server serves "
                       f"{', '.join(f'`{n}`' for n in served)}.", "model", "model_not_found")
    return served[0]


def _max_tokens(body: dict, context: int, least: int = 1) -> int | None:
    """max_completion_tokens (or the older max_tokens; vLLM prefers the former). One larger
    than the model's context can never be met: 400. One that fits the context but not beside
    this prompt is clamped by the worker (finish_reason "length"), as vLLM does. `least`: 0
    where no answer is a request (an echoed completion, scoring its prompt)."""
    limits = {}
    for name in ("max_completion_tokens", "max_tokens"):
        limits[name] = integer(body, name, least, UINT32_MAX)
        if context and (limits[name] or 0) > context:
            raise bad_request(f"'{name}' is {limits[name]}, more than the model's context of "
                              f"{context} tokens", name)
    return next((v for v in limits.values() if v is not None), None)


def min_tokens(body: dict, max_tokens: int, context: int, param: str = "min_tokens",
               limit: str = "max_tokens") -> int:
    """vLLM's min_tokens: at most max_tokens (`limit`, its name; when set) and the model's
    context."""
    name = param.rsplit(".", 1)[-1]
    least = integer(body, name, 0, UINT32_MAX, 0, param)
    if max_tokens and least > max_tokens:
        raise bad_request(f"'{name}' is {least}, more than the {max_tokens} tokens the answer "
                          f"may have ({limit})", param)
    if context and least > context:
        raise bad_request(f"'{name}' is {least}, more than the model's context of {context} "
                          "tokens", param)
    return least


def parse_ending(body: dict, parsed: Parsed) -> None:
    """vLLM's ignore_eos and `stop` (a string or up to MAX_STOPS; empty ones ask nothing)."""
    parsed.ignore_eos = typed(body, "ignore_eos", (bool,), False)
    stop = typed(body, "stop", (str, list), [])
    stop = [stop] if isinstance(stop, str) else stop
    if len(stop) > MAX_STOPS or not all(isinstance(s, str) for s in stop):
        raise bad_request(f"'stop' must be a string or up to {MAX_STOPS} strings", "stop")
    parsed.stop = [s for s in stop if s]


def _common(body: dict, parsed: Parsed, config: GatewayConfig,
            max_tokens_default: int = 0) -> None:
    limit = _max_tokens(body, config.max_model_len, 0 if parsed.echo else 1)
    parsed.max_tokens = limit if limit is not None else max_tokens_default
    parsed.prompt_only = limit == 0
    parsed.min_tokens = min_tokens(body, parsed.max_tokens, config.max_model_len)
    if parsed.prompt_only and parsed.min_tokens:
        raise bad_request("'min_tokens' asks for an answer, and max_tokens 0 for none",
                          "min_tokens")
    parse_sampling(body, parsed, config.vocab_size)
    parse_ending(body, parsed)
    parsed.stream = typed(body, "stream", (bool,), False)
    options = typed(body, "stream_options", (dict,))
    if options is not None:
        if not parsed.stream:
            raise bad_request("'stream_options' is only allowed when 'stream' is true",
                              "stream_options")
        parsed.include_usage = bool(typed(options, "include_usage", (bool,), False,
                                          "stream_options.include_usage"))
        # vLLM's: only with include_usage (alone it asks for nothing there either)
        parsed.continuous_usage = parsed.include_usage and bool(typed(
            options, "continuous_usage_stats", (bool,), False,
            "stream_options.continuous_usage_stats"))
    # n answers are n turns of the same prompt, answered together (completion_batch.py);
    # at most MAX_PROMPTS choices per request, as for a batch of prompts
    parsed.n = integer(body, "n", 1, MAX_PROMPTS, 1)
    typed(body, "user", (str,), "")  # OpenAI's end-user id: checked, names no conversation
    parsed.conversation_id = typed(body, "conversation_id", (str,), "")
    parsed.cache_salt = cache_salt(body)
    parsed.add_special_tokens = typed(body, "add_special_tokens", (bool,))
    parsed.cached_details = typed(body, "return_cached_tokens_details", (bool,), False)


def _content(message: dict, i: int) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise bad_request("only text content parts are supported",
                                  f"messages[{i}].content")
            parts.append(part["text"])
        return "".join(parts)
    raise bad_request("'content' must be a string or an array of text parts",
                      f"messages[{i}].content")


def _name(message: dict, i: int) -> str:
    """OpenAI's participant `name`: for the chat template, which shows it or not (as vLLM)."""
    name = typed(message, "name", (str,), "", f"messages[{i}].name") or ""
    if len(name.encode()) > MAX_NAME_BYTES or not name.isprintable():
        raise bad_request(f"a message's name must be printable and at most {MAX_NAME_BYTES} "
                          "bytes", f"messages[{i}].name")
    return name


def _template_flags(body: dict, parsed: Parsed) -> None:
    """vLLM's prefill flags: continue_final_message leaves the last assistant message open;
    add_generation_prompt=false opens no assistant turn after the last message."""
    cont = typed(body, "continue_final_message", (bool,), False)
    gen = typed(body, "add_generation_prompt", (bool,), True)
    if cont and gen:
        raise bad_request("continue_final_message and add_generation_prompt cannot both be "
                          "true (set add_generation_prompt to false)", "continue_final_message")
    if cont and (parsed.messages[-1][0] != "assistant" or not parsed.messages[-1][1]):
        raise bad_request("continue_final_message needs a last assistant message with "
                          "content", "messages")
    parsed.continue_final_message, parsed.no_generation_prompt = cont, not gen


def parse_messages(body: dict, parsed: Parsed) -> None:
    """`messages` and the template's flags into `parsed` (a chat request's, /tokenize's)."""
    messages = typed(body, "messages", (list,))
    if not messages:
        raise bad_request("'messages' must be a non-empty array", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request("each message must be an object", f"messages[{i}]")
        role = m.get("role")
        if role not in ROLES:
            raise bad_request(f"message role {str(role)[:40]!r} is not supported (system, "
                              "developer, user, assistant)", f"messages[{i}].role")
        parsed.messages.append((ROLES[role], _content(m, i)))
        parsed.names.append(_name(m, i))
    _template_flags(body, parsed)
    parsed.template_kwargs = _template_kwargs(body)


def _template_kwargs(body: dict) -> str:
    """vLLM's chat_template_kwargs: variables for the chat template (a template that reads
    none of them renders as without them), as compact JSON."""
    kwargs = typed(body, "chat_template_kwargs", (dict,)) or {}
    taken = sorted(set(TEMPLATE_RESERVED) & kwargs.keys())
    if taken:
        raise bad_request(f"chat_template_kwargs may not set {taken[0]!r} (the server sets "
                          "it, or it asks for tools)", f"chat_template_kwargs.{taken[0]}")
    text = json.dumps(kwargs, separators=(",", ":"), ensure_ascii=False) if kwargs else ""
    if len(text.encode()) > MAX_TEMPLATE_KWARGS_BYTES:
        raise bad_request(f"chat_template_kwargs holds more than {MAX_TEMPLATE_KWARGS_BYTES} "
                          "bytes as JSON", "chat_template_kwargs")
    return text


def parse_chat(body: dict, config: GatewayConfig) -> Parsed:
    check_chat_fields(body)
    parsed = Parsed()
    parse_messages(body, parsed)
    _common(body, parsed, config)
    # OpenAI's chat: logprobs a boolean, top_logprobs 0..20 and only with it
    parsed.logprobs = typed(body, "logprobs", (bool,), False)
    parsed.top_logprobs = integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0)
    if parsed.top_logprobs and not parsed.logprobs:
        raise bad_request("top_logprobs needs 'logprobs': true", "top_logprobs")
    return parsed


def parse_completion(body: dict, config: GatewayConfig) -> list[Parsed]:
    """One Parsed turn per prompt (completion_prompts.py: a batch is several). A text prompt
    is raw text, tokenized as it is (no chat template), as in OpenAI and vLLM; token ids are
    passed through as they are, once checked against the vocabulary. `echo` puts the prompt
    before the answer; a token-id prompt's text then comes from the worker (its tokens' bytes),
    as do the prompt's logprobs."""
    check_completion_fields(body)
    prompts = completion_prompts(body, config.vocab_size)
    parsed = Parsed()
    for name, refused in (("suffix", bool(body.get("suffix"))),
                          ("best_of", body.get("best_of") not in (None, 1))):
        if refused:
            raise bad_request(f"{name} is not supported", name)
    parsed.echo = typed(body, "echo", (bool,), False)
    _common(body, parsed, config, max_tokens_default=16)  # OpenAI's default for completions
    if len(prompts) * parsed.n > MAX_PROMPTS:
        raise bad_request(f"{len(prompts)} prompts x n={parsed.n} choices: at most "
                          f"{MAX_PROMPTS} choices per request", "n")
    # legacy completions: logprobs is the number of alternatives (OpenAI's most is 5, vLLM's
    # 20: we take vLLM's); 0 gives the chosen tokens' logprobs only
    top = integer(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    parsed.logprobs, parsed.top_logprobs = top is not None, top or 0
    return [dataclasses.replace(
        parsed, raw_prompt=p if isinstance(p, str) else "",
        prompt_token_ids=p if isinstance(p, list) else [],
        prompt_logprobs=parsed.echo and (parsed.logprobs or isinstance(p, list)))
        for p in prompts]
