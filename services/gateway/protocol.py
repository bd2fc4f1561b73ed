"""OpenAI request bodies -> the fields of a bidaw.v1.TurnRequest, with OpenAI's validation rules.

Sampling knobs the engine does not have (top_p, penalties, logit_bias) are accepted and ignored
so that stock clients work; features whose absence would change the answer's meaning (n > 1,
logprobs, tools, echo) are refused with 400 rather than silently dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ApiError, bad_request

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_STOPS = 16


@dataclass
class Parsed:
    """What one HTTP request asks of one turn."""
    messages: list[tuple[str, str]] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    max_tokens: int = 0  # 0: the worker's default
    temperature: float = 1.0
    seed: int = 0
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    user: str = ""


def _typed(body: dict, name: str, kinds: tuple, default=None):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in kinds:  # JSON true is not a number here
        raise bad_request(f"'{name}' must be {_kind_names(kinds)}", name)
    if not isinstance(value, kinds):
        raise bad_request(f"'{name}' must be {_kind_names(kinds)}", name)
    return value


def _kind_names(kinds: tuple) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "an object"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def check_model(body: dict, served: str) -> str:
    model = _typed(body, "model", (str,), served)
    if model != served:
        raise ApiError(404, f"The model `{model}` does not exist. This server serves "
                       f"`{served}`.", "model", "model_not_found")
    return model


def _common(body: dict, parsed: Parsed, max_tokens_default: int = 0) -> None:
    limit = _typed(body, "max_completion_tokens", (int,))
    limit = _typed(body, "max_tokens", (int,), limit)
    if limit is not None and limit < 1:
        raise bad_request("'max_tokens' must be at least 1", "max_tokens")
    parsed.max_tokens = limit if limit is not None else max_tokens_default
    temperature = _typed(body, "temperature", (int, float), 1.0)
    if not 0.0 <= temperature <= 2.0:
        raise bad_request(f"'temperature' {temperature} is outside [0, 2]", "temperature")
    parsed.temperature = float(temperature)
    seed = _typed(body, "seed", (int,), 0)
    parsed.seed = seed % (1 << 64)
    parsed.ignore_eos = _typed(body, "ignore_eos", (bool,), False)
    stop = _typed(body, "stop", (str, list), [])
    stop = [stop] if isinstance(stop, str) else stop
    if len(stop) > MAX_STOPS or not all(isinstance(s, str) for s in stop):
        raise bad_request(f"'stop' must be a string or up to {MAX_STOPS} strings", "stop")
    parsed.stop = [s for s in stop if s]
    parsed.stream = _typed(body, "stream", (bool,), False)
    options = _typed(body, "stream_options", (dict,))
    if options is not None:
        if not parsed.stream:
            raise bad_request("'stream_options' is only allowed when 'stream' is true",
                              "stream_options")
        parsed.include_usage = bool(_typed(options, "include_usage", (bool,), False))
    if _typed(body, "n", (int,), 1) != 1:
        raise bad_request("only n=1 is supported", "n")
    if _typed(body, "logprobs", (bool, int), False):
        raise bad_request("logprobs are not supported", "logprobs")
    parsed.user = _typed(body, "user", (str,), "")


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


def parse_chat(body: dict) -> Parsed:
    parsed = Parsed()
    messages = _typed(body, "messages", (list,))
    if not messages:
        raise bad_request("'messages' must be a non-empty array", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request("each message must be an object", f"messages[{i}]")
        role = m.get("role")
        if role not in ROLES:
            raise bad_request(f"message role {role!r} is not supported (system, developer, "
                              "user, assistant)", f"messages[{i}].role")
        parsed.messages.append((ROLES[role], _content(m, i)))
    if body.get("tools"):
        raise bad_request("tools are not supported", "tools")
    _common(body, parsed)
    return parsed


def parse_completion(body: dict) -> Parsed:
    """A text prompt becomes one user message (the worker applies the chat template; the
    Scheduler API has no raw-text prompt); token ids are passed through as they are."""
    parsed = Parsed()
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        parsed.messages.append(("user", prompt))
    elif isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        parsed.prompt_token_ids = prompt
    else:
        raise bad_request("'prompt' must be a non-empty string or array of token ids (one "
                          "prompt per request)", "prompt")
    if body.get("echo") is True or body.get("suffix") or body.get("best_of") not in (None, 1):
        raise bad_request("echo, suffix and best_of are not supported")
    _common(body, parsed, max_tokens_default=16)  # OpenAI's default for completions
    return parsed
