"""vLLM's tokenizer routes at the server root: POST /tokenize, POST /detokenize and
GET /tokenizer_info, for clients that tokenize through the server (lm-evaluation-harness's
RemoteTokenizer). The gateway has no tokenizer: the scheduler relays each call to a worker,
whose tokenizer its turns use, so `count` is what a turn of the same prompt reports as
prompt_tokens (a text prompt as a completion's, messages as a chat's). Same API keys and
per-tenant limits as a turn; no admission slot (no generation). A text longer than the context
is still tokenized (the client wants its count); the body limit bounds it."""
from __future__ import annotations

import grpc
from aiohttp import web

from services.gateway.errors import ApiError, bad_request, from_grpc
from services.gateway.fields import check_token_ids, typed
from services.gateway.protocol import Parsed, check_model, parse_messages
from services.gateway.request_body import read_body
from services.gateway.request_fields import check_fields, check_message_fields
from services.gateway.turns import chat_messages
from services.runtime.gen import common_pb2

TEXT_FIELDS = {"model", "prompt", "add_special_tokens"}
CHAT_FIELDS = {"model", "messages", "add_special_tokens", "add_generation_prompt",
               "continue_final_message", "tools", "chat_template_kwargs"}
NEUTRAL = {"return_token_strs": (False,), "mm_processor_kwargs": ({},)}
# the field a worker's refusal is about, as the client named it
PARAMS = {common_pb2.TOKENIZE_OP_TEXT: "prompt", common_pb2.TOKENIZE_OP_MESSAGES: "messages",
          common_pb2.TOKENIZE_OP_DETOKENIZE: "tokens"}


class TokenizerApi:
    def __init__(self, gateway):
        self.gateway = gateway

    def routes(self) -> list:
        return [web.post("/tokenize", self.tokenize), web.post("/detokenize", self.detokenize),
                web.get("/tokenizer_info", self.info)]

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if "messages" in body:  # vLLM's chat form: the template over them, as a chat turn
            check_fields(body, CHAT_FIELDS, NEUTRAL)
            check_message_fields(body)
            parsed = Parsed()
            parse_messages(body, parsed)
            typed(body, "add_special_tokens", (bool,))  # the template writes any BOS itself
            call = common_pb2.TokenizeRequest(
                op=common_pb2.TOKENIZE_OP_MESSAGES,
                messages=chat_messages(parsed), chat_template_kwargs=parsed.template_kwargs,
                no_generation_prompt=parsed.no_generation_prompt,
                continue_final_message=parsed.continue_final_message)
        else:
            check_fields(body, TEXT_FIELDS, NEUTRAL)
            prompt = typed(body, "prompt", (str,))
            if prompt is None:
                raise bad_request("'prompt' (a string) or 'messages' is required", "prompt")
            call = common_pb2.TokenizeRequest(
                op=common_pb2.TOKENIZE_OP_TEXT, prompt=prompt,
                add_special_tokens=typed(body, "add_special_tokens", (bool,), True))
        reply = await self._call(request, call)
        return web.json_response({"count": len(reply.token_ids),
                                  "max_model_len": reply.info.max_context,
                                  "tokens": list(reply.token_ids), "token_strs": None})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        check_fields(body, {"model", "tokens"}, {})
        tokens = typed(body, "tokens", (list,))
        if tokens is None or not all(isinstance(t, int) and not isinstance(t, bool)
                                     for t in tokens):
            raise bad_request("'tokens' must be an array of token ids", "tokens")
        check_token_ids(tokens, self.gateway.config.vocab_size, "tokens")
        reply = await self._call(request, common_pb2.TokenizeRequest(
            op=common_pb2.TOKENIZE_OP_DETOKENIZE, token_ids=tokens))
        return web.json_response({"prompt": reply.text})  # a split character: U+FFFD

    async def info(self, request: web.Request) -> web.Response:
        self.gateway._tenant(request)
        i = (await self._call(request, common_pb2.TokenizeRequest(
            op=common_pb2.TOKENIZE_OP_INFO))).info
        # the fields of a Hugging Face tokenizer_config.json that vLLM's answer carries
        return web.json_response({
            "tokenizer_class": "PreTrainedTokenizerFast", "name_or_path": i.model,
            "bos_token": i.bos_token or None, "eos_token": i.eos_token or None,
            "pad_token": i.pad_token or None, "unk_token": None,
            "chat_template": i.chat_template or None, "model_max_length": i.max_context,
            "add_bos_token": i.add_bos_token, "add_eos_token": False,
            "clean_up_tokenization_spaces": False, "vocab_size": i.vocab_size})

    async def _body(self, request: web.Request) -> dict:
        """The caller's tenant checked, then its body read and its model checked."""
        self.gateway._tenant(request)
        config = self.gateway.config
        body = await read_body(request, config.max_body_bytes, config.body_read_timeout_s)
        check_model(body, config.served_model_name)
        return body

    async def _call(self, request: web.Request,
                    call: common_pb2.TokenizeRequest) -> common_pb2.TokenizeReply:
        gateway = self.gateway
        tenant = gateway._tenant(request)
        gateway._admit_tenant(tenant)  # the tenant's rate and concurrency, as for a turn
        try:
            return await gateway.backend.tokenize(call, gateway.config.request_timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise bad_request(exc.details() or "invalid request", PARAMS.get(call.op)) \
                    from None
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # an older scheduler behind us
                raise ApiError(501, "the scheduler behind this gateway cannot tokenize (an "
                               "older version)", None, "not_implemented") from None
            raise from_grpc(exc, gateway.config.retry_after_s) from None
        finally:
            gateway.tenant_in_flight.leave(tenant)
