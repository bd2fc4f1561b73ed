"""The worker's Tokenize: its own tokenizer, through the very functions its turns tokenize
their prompts with (prompt.py), so a client's count is the turn's prompt_tokens."""
from __future__ import annotations

from services.runtime.gen import common_pb2

from compute_worker.prompt import TurnError, chat_ids


def tokenizer_info(tokenizer, max_context: int, model: str) -> common_pb2.TokenizerInfo:
    spell = lambda i: tokenizer.tokenizer.id_to_token(i) or "" if i is not None else ""  # noqa: E731
    eos = tokenizer.eos_token_ids[0] if tokenizer.eos_token_ids else None
    return common_pb2.TokenizerInfo(
        bos_token=spell(tokenizer.bos_token_id), eos_token=spell(eos),
        pad_token=spell(getattr(tokenizer, "pad_token_id", None)),
        chat_template=tokenizer.chat_template or "", vocab_size=tokenizer.vocab_size,
        add_bos_token=tokenizer.add_bos, max_context=max_context, model=model)


def tokenize(tokenizer, request: common_pb2.TokenizeRequest,
             info: common_pb2.TokenizerInfo) -> common_pb2.TokenizeReply:
    """The reply to a request tokenize_bounds.py accepted; TurnError for what only the
    tokenizer can refuse (an id past its vocabulary, a template that refuses the messages)."""
    reply = common_pb2.TokenizeReply(info=info)
    if request.op == common_pb2.TOKENIZE_OP_TEXT:  # a raw prompt's ids (prompt.prompt_ids)
        reply.token_ids.extend(tokenizer.encode(
            request.prompt, add_bos=request.add_special_tokens and tokenizer.add_bos))
    elif request.op == common_pb2.TOKENIZE_OP_MESSAGES:
        turn = common_pb2.TurnRequest(messages=request.messages,
                                      chat_template_kwargs=request.chat_template_kwargs,
                                      no_generation_prompt=request.no_generation_prompt,
                                      continue_final_message=request.continue_final_message)
        try:
            reply.token_ids.extend(chat_ids(turn, tokenizer))
        except TurnError:
            raise
        except ValueError as exc:  # the template's raise_exception (roles out of order...)
            raise TurnError(f"messages: the chat template refused them: {exc}") from None
    elif request.op == common_pb2.TOKENIZE_OP_DETOKENIZE:
        ids = list(request.token_ids)
        bad = next((t for t in ids if t >= info.vocab_size), None)
        if bad is not None:
            raise TurnError(f"token_ids: {bad} is outside the vocabulary [0, "
                            f"{info.vocab_size})")
        reply.text = tokenizer.decode(ids)  # a split character: U+FFFD per stray byte
    return reply
