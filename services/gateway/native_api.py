"""SGLang's native API (POST /generate and its helpers), so that SGLang's own clients, its
multi-turn benchmark among them, run against the gateway unchanged.

A /generate body becomes the same Parsed turn a completion builds (a raw text prompt or token
ids, the same sampling checks), and passes the same auth, tenant limits, FIFO admission and
prompt bound (app.Gateway._turn). Its answer is SGLang's: `text` is the CUMULATIVE generated
text of each stream chunk, `meta_info` carries the token counts and finish reason. As on the
OpenAI routes, an option that would change the answer is refused with a 400 naming it.
`return_logprob` adds SGLang's output_token_logprobs / output_top_logprobs to meta_info,
cumulative like the text (each chunk's cover the tokens whose text it has released); with
`logprob_start_len` >= 0, input_token_logprobs / input_top_logprobs from that prompt position
on, in every chunk (the worker computes the prompt afresh for them).
"""
from __future__ import annotations

import json
import uuid

import grpc
from aiohttp import web

from services.runtime import metrics

from services.gateway.errors import ApiError, bad_request, from_grpc
from services.gateway.fields import INT32_MAX, UINT32_MAX, check_token_ids, integer, typed
from services.gateway import logprobs as shapes
from services.gateway.logprobs import PromptSteps
from services.gateway.prompt_size import check_prompt_size
from services.gateway.protocol import Parsed, check_model, min_tokens
from services.runtime.turn_bounds import MAX_STOPS
from services.gateway.responses import VERSION, LiveUsage, cached_details, extension
from services.gateway.sampling_params import parse_sampling
from services.gateway.turns import TurnServer, sse

SGLANG_MAX_NEW_TOKENS = 128  # SGLang's default when sampling_params names none
# top-level fields that are accepted only at their neutral value (None is always neutral)
TOP_NEUTRAL = {"lora_path": ("",), "image_data": ("", []), "return_hidden_states": (False,),
               # SGLang's bench_serving sends return_routed_experts: false with every request
               "return_routed_experts": (False,), "routed_experts_start_len": (0,),
               "return_indexer_topk": (False,), "return_entropy": (False,),
               "return_bytes": (False,), "return_prompt_token_ids": (False,),
               "token_ids_logprob": ([],), "video_data": ("", []), "audio_data": ("", []),
               "modalities": ([],), "background": (False,), "require_reasoning": (False,)}
TOP_IGNORED = ("rid", "log_metrics", "no_logs", "custom_labels")  # no effect on the answer
TOP_READ = ("text", "input_ids", "sampling_params", "stream", "model", "return_logprob",
            "top_logprobs_num", "logprob_start_len", "return_text_in_logprobs")
# sampling_params read by parse_sampling or here; then those refused unless neutral
SAMPLING_READ = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
                 "frequency_penalty", "repetition_penalty", "logit_bias", "seed", "stop",
                 "ignore_eos", "n", "skip_special_tokens", "spaces_between_special_tokens",
                 "min_new_tokens")
SAMPLING_NEUTRAL = {"regex": (), "json_schema": (), "ebnf": (), "structural_tag": (),
                    "stop_token_ids": ([],), "no_stop_trim": (False,)}


def _renamed(exc: ApiError, param: str) -> ApiError:
    """A shared helper's error, naming the field as a /generate client sent it."""
    return ApiError(exc.status, exc.message, param, exc.code, exc.retry_after)


def _refuse(body: dict, neutral: dict, read: tuple, prefix: str = "") -> None:
    for name, value in body.items():
        if name in read:
            continue
        if name not in neutral:
            raise bad_request(f"'{prefix}{name[:60]}' is not supported by this server",
                              prefix + name[:60])
        if value is not None and value not in neutral[name]:
            raise bad_request(f"'{prefix}{name}' is not supported (only "
                              f"{' or '.join(json.dumps(v) for v in neutral[name]) or 'null'})",
                              prefix + name)


def _prompt(body: dict, parsed: Parsed, vocab_size: int) -> None:
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise bad_request("send exactly one of 'text' and 'input_ids'", "text")
    if text is not None:
        if not isinstance(text, str) or not text:
            raise bad_request("'text' must be a non-empty string (one prompt per request)",
                              "text")
        parsed.raw_prompt = text
        return
    if not isinstance(ids, list) or not ids or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise bad_request("'input_ids' must be a non-empty array of token ids (one prompt "
                          "per request)", "input_ids")
    check_token_ids(ids, vocab_size, "input_ids", "input_ids token id")
    parsed.prompt_token_ids = ids


def _sampling(sp: dict, parsed: Parsed, config) -> None:
    p = "sampling_params."
    _refuse(sp, SAMPLING_NEUTRAL, SAMPLING_READ, p)
    # 0 as SGLang takes it: the prompt computed (its KV kept), no token generated
    parsed.max_tokens = integer(sp, "max_new_tokens", 0, UINT32_MAX, SGLANG_MAX_NEW_TOKENS,
                                p + "max_new_tokens")
    parsed.prompt_only = parsed.max_tokens == 0
    if config.max_model_len and parsed.max_tokens > config.max_model_len:
        raise bad_request(f"'max_new_tokens' is {parsed.max_tokens}, more than the model's "
                          f"context of {config.max_model_len} tokens", p + "max_new_tokens")
    parsed.min_tokens = min_tokens(sp, parsed.max_tokens, config.max_model_len,
                                   p + "min_new_tokens")
    if parsed.prompt_only and parsed.min_tokens:
        raise bad_request("'min_new_tokens' asks for an answer, and max_new_tokens 0 for none",
                          p + "min_new_tokens")
    try:
        parse_sampling(sp, parsed, config.vocab_size)
    except ApiError as exc:
        raise _renamed(exc, p + (exc.param or "")) from None
    parsed.ignore_eos = typed(sp, "ignore_eos", (bool,), False, p + "ignore_eos")
    stop = typed(sp, "stop", (str, list), [], p + "stop")
    stop = [stop] if isinstance(stop, str) else stop
    if len(stop) > MAX_STOPS or not all(isinstance(s, str) for s in stop):
        raise bad_request(f"'stop' must be a string or up to {MAX_STOPS} strings", p + "stop")
    parsed.stop = [s for s in stop if s]
    if integer(sp, "n", 1, INT32_MAX, 1, p + "n") != 1:
        raise bad_request("only n=1 is supported", p + "n")
    if not typed(sp, "skip_special_tokens", (bool,), True, p + "skip_special_tokens"):
        raise bad_request("only skip_special_tokens=true is supported",
                          p + "skip_special_tokens")
    typed(sp, "spaces_between_special_tokens", (bool,), True,
          p + "spaces_between_special_tokens")  # no effect: special tokens are skipped


def _logprobs(body: dict, parsed: Parsed) -> tuple[bool, int]:
    """return_logprob and top_logprobs_num (0..20) as the OpenAI routes' logprobs; with
    logprob_start_len >= 0, the prompt's too from that position on (-1: the answer's only).
    Returns return_text_in_logprobs and the start (-1: none)."""
    parsed.logprobs = typed(body, "return_logprob", (bool,), False)
    parsed.top_logprobs = integer(body, "top_logprobs_num", 0, shapes.MAX_TOP_LOGPROBS, 0)
    start = integer(body, "logprob_start_len", -1, INT32_MAX, -1)
    if parsed.top_logprobs and not parsed.logprobs:
        raise bad_request("top_logprobs_num needs 'return_logprob': true", "top_logprobs_num")
    parsed.prompt_logprobs = parsed.logprobs and start >= 0
    return typed(body, "return_text_in_logprobs", (bool,), False), \
        start if parsed.prompt_logprobs else -1


def parse_generate(body: dict, config) -> tuple[Parsed, bool, int]:
    """A /generate body -> the Parsed turn (what a completion with that prompt would be),
    whether logprobs carry the tokens' text, and the first prompt position whose logprobs are
    given (-1: none)."""
    _refuse(body, TOP_NEUTRAL, TOP_READ + TOP_IGNORED)
    check_model(body, config.served_model_name)  # optional; if sent, a served name
    parsed = Parsed()
    with_text, start = _logprobs(body, parsed)
    _prompt(body, parsed, config.vocab_size)
    _sampling(typed(body, "sampling_params", (dict,), {}), parsed, config)
    parsed.stream = typed(body, "stream", (bool,), False)
    try:
        check_prompt_size(parsed, False, config.max_prompt_bytes, config.max_model_len)
    except ApiError as exc:
        raise _renamed(exc, "text") from None
    return parsed, with_text, start


class NativeReply:
    """One answer's id and its SGLang-shaped chunks; with logprobs, `steps` are the
    StepLogprobs of every token so far whose text was released, and `prompt` the prompt's
    (a logprobs.PromptSteps), given from position `start` on when >= 0."""

    def __init__(self, logprobs: bool = False, with_text: bool = False, start: int = -1):
        self.id = uuid.uuid4().hex
        self.logprobs = logprobs
        self.with_text = with_text
        self.start = start

    def chunk(self, text: str, summary=None, steps=(), prompt: PromptSteps | None = None,
              counted: LiveUsage | None = None) -> dict:
        logprobs = shapes.native(steps, self.with_text) if self.logprobs else {}
        if self.start >= 0 and prompt is not None:
            logprobs.update(shapes.native_input(prompt.steps, self.start, self.with_text))
        if summary is None:  # SGLang's clients read the counts from every chunk
            counts = {} if counted is None else {
                "prompt_tokens": counted.prompt, "completion_tokens": counted.completion,
                "cached_tokens": counted.cached}
            return {"text": text, "meta_info": {"id": self.id, "finish_reason": None,
                                                **counts, **logprobs}}
        finish = ({"type": "length", "length": summary.completion_tokens}
                  if summary.finish_reason == "length" else {"type": "stop", "matched": None})
        return {"text": text, "meta_info": {
            "id": self.id, "finish_reason": finish, "prompt_tokens": summary.prompt_tokens,
            "completion_tokens": summary.completion_tokens,
            "cached_tokens": summary.cached_tokens,
            "cached_tokens_details": cached_details(summary), "e2e_latency": summary.latency_s,
            **logprobs, "bidaw": extension(summary)}}

    def complete(self, text: str, summary, steps=(), prompt: PromptSteps | None = None) -> dict:
        """The non-streamed answer (TurnServer._whole): the last chunk's shape."""
        return self.chunk(text, summary, steps=steps, prompt=prompt)


def sse(payload) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class NativeTurns(TurnServer):
    """TurnServer's session, tracing and cancellation, with SGLang's answer shapes (the whole
    answer via NativeReply.complete, the stream below)."""

    async def _stream(self, request, call, first, parsed: Parsed, reply: NativeReply,
                      headers: dict) -> web.StreamResponse:
        response = await self._open_stream(request, reply.id, headers)
        text, steps, prompt = "", [], PromptSteps()
        counted = LiveUsage(first)
        try:
            async for event in self._events(call, first):
                if event.prompt_logprobs:
                    prompt.add(event)
                counted.add(event)
                text += event.text
                steps.extend(event.logprobs)
                if event.HasField("summary"):
                    self._finished(event.summary, request)
                    await response.write(sse(reply.chunk(text, event.summary, steps=steps,
                                                          prompt=prompt)))
                elif event.text:
                    await response.write(sse(reply.chunk(text, steps=steps, prompt=prompt,
                                                          counted=counted)))
        except grpc.RpcError as exc:  # headers are gone: report in-band
            metrics.TURNS.labels("error").inc()
            await response.write(sse(from_grpc(exc, self.retry_after).body()))
        except (ConnectionResetError, ConnectionError):
            self._hung_up(request)
            return response
        await response.write(sse("[DONE]"))
        await response.write_eof()
        return response


class NativeApi:
    """The native routes; turns go through the gateway's own admission (Gateway._turn)."""

    def __init__(self, gateway):
        self.gateway = gateway
        self.turns = NativeTurns(gateway.backend, gateway.config.retry_after_s,
                                 gateway.config.max_session_id)

    def routes(self) -> list:
        return [web.post("/generate", self.generate),  # (/flush_cache: sessions_api.py)
                web.get("/get_model_info", self.model_info),
                web.get("/model_info", self.model_info),  # SGLang's newer names
                web.get("/server_info", self.server_info),
                web.get("/get_server_info", self.server_info),
                web.get("/health_generate", self.gateway.health)]

    def _prepare(self, request: web.Request, tenant: str, body: dict):
        parsed, with_text, start = parse_generate(body, self.gateway.config)
        return lambda: self.turns.serve(request, tenant, parsed,
                                        NativeReply(parsed.logprobs, with_text, start))

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self.gateway._turn(request, self._prepare)

    def _model(self) -> dict:
        """SGLang's model info. tokenizer_path: a served name spelt as a Hugging Face id (what
        SGLang's benchmark loads a tokenizer from when given none), else null."""
        names = self.gateway.config.served_model_name
        return {"model_path": names[0], "is_generation": True,
                "tokenizer_path": next((n for n in names if "/" in n), None)}

    async def model_info(self, request: web.Request) -> web.Response:
        self.gateway._tenant(request)
        return web.json_response(self._model())

    async def server_info(self, request: web.Request) -> web.Response:
        """SGLang's server info, what its benchmark reads at the end of a run: the model, and
        no internal states (no speculative decoding here). Nothing of the configuration."""
        self.gateway._tenant(request)
        return web.json_response({**self._model(), "version": VERSION,
                                  "served_model_name": list(self.gateway.config.served_model_name),
                                  "max_model_len": self.gateway.config.max_model_len or None,
                                  "internal_states": []})
