"""Chat tokenizer: byte-level BPE (from GGUF metadata or tokenizer.json) + the model's Jinja template.

Special/control tokens (<|im_start|>, <|im_end|>, ...) are atomic added tokens, so text on either
side of a message boundary is tokenised independently. That is what makes the ids of a
conversation's first N messages a prefix of the ids of the longer conversation (KV reuse relies
on it). The exception is a message whose content starts with whitespace that merges with the
template's preceding newline.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

# Pre-tokenizer regexes per llama.cpp `tokenizer.ggml.pre` value (learned from llama.cpp's table).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLIT_DIGITS = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_PRE_REGEX = {"llama-bpe": _LLAMA3, "llama3": _LLAMA3, "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2}

TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 3, 4


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    split = lambda rx: pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False)  # noqa: E731
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in _SPLIT_DIGITS:  # every digit is its own pre-token, then the GPT-2 regex
        return pre_tokenizers.Sequence([split(r"\p{N}"), split(_GPT2), byte_level])
    return pre_tokenizers.Sequence([split(_PRE_REGEX.get(pre, _GPT2)), byte_level])


def _token_str(v: Any) -> str | None:
    return v.get("content") if isinstance(v, dict) else v


class ChatTokenizer:
    def __init__(self, tokenizer: Tokenizer, chat_template: str | None, *, bos_token_id: int | None,
                 eos_token_ids: list[int], add_bos: bool = False,
                 pad_token_id: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.pad_token_id = pad_token_id  # only described (/tokenizer_info), never used
        self.chat_template = chat_template
        self.bos_token_id = bos_token_id
        self.eos_token_ids = list(dict.fromkeys(eos_token_ids))
        self.add_bos = add_bos
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
            x, indent=indent, ensure_ascii=ensure_ascii)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(chat_template) if chat_template else None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, reader_or_path: Any) -> "ChatTokenizer":
        """From a GGUF file's metadata: a loaders/gguf_file.py GGUFFile or the file's path."""
        from compute_worker.loaders.gguf_file import GGUFFile

        r = reader_or_path if isinstance(reader_or_path, GGUFFile) else GGUFFile(reader_or_path)
        f = r.fields.get
        if f("tokenizer.ggml.model") != "gpt2":
            raise NotImplementedError(f"tokenizer model {f('tokenizer.ggml.model')!r} (only byte-level BPE)")
        tokens: list[str] = f("tokenizer.ggml.tokens")
        types: list[int] = f("tokenizer.ggml.token_type", [1] * len(tokens))
        merges = [tuple(m.split(" ", 1)) for m in f("tokenizer.ggml.merges")]
        bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False)
        tok = Tokenizer(bpe)
        tok.pre_tokenizer = _pre_tokenizer(f("tokenizer.ggml.pre", "default"))
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL])
        tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                        for i, t in enumerate(types) if t == TOKEN_TYPE_USER_DEFINED])
        eos = [f(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                              "tokenizer.ggml.eom_token_id") if f(k) is not None]
        return cls(tok, f("tokenizer.chat_template"), bos_token_id=f("tokenizer.ggml.bos_token_id"),
                   eos_token_ids=[int(e) for e in eos], add_bos=bool(f("tokenizer.ggml.add_bos_token", False)),
                   pad_token_id=f("tokenizer.ggml.padding_token_id"))

    @classmethod
    def from_hf_dir(cls, path: str | Path, eos_token_ids: list[int] | None = None) -> "ChatTokenizer":
        path = Path(path)
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
        template = cfg.get("chat_template")
        if isinstance(template, list):  # named templates: take the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text()
        ids = lambda key: tok.token_to_id(_token_str(cfg.get(key)) or "")  # noqa: E731
        eos = list(eos_token_ids or []) + [i for i in [ids("eos_token")] if i is not None]
        return cls(tok, template, bos_token_id=ids("bos_token"), eos_token_ids=eos,
                   add_bos=bool(cfg.get("add_bos_token", False)), pad_token_id=ids("pad_token"))

    # -- API -------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos_token_id, *ids] if add_bos and self.bos_token_id is not None else ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                    **kwargs: Any) -> str:
        if self._template is None:
            raise ValueError("this tokenizer has no chat template")
        tok = lambda i: self.tokenizer.id_to_token(i) if i is not None else ""  # noqa: E731
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=tok(self.bos_token_id), eos_token=tok(self.eos_token_ids[0] if self.eos_token_ids else None),
            **kwargs)

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> list[int]:
        # The template writes BOS itself when the model wants one, so never add another.
        return self.encode(self.render_chat(messages, add_generation_prompt, **kwargs))


def _raise(message: str) -> None:
    raise ValueError(message)
