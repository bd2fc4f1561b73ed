"""Checkpoint tensor names -> our parameter names, and a strict loader shared by all loaders/tests."""
from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from compute_worker.models.base import CausalLM

_L = r"(?:model\.)?layers\.(\d+)\."
_D = r"(?:model\.)?decoder\."

# (regex on the checkpoint name, replacement giving our name)
HF_LLAMA: list[tuple[str, str]] = [
    (r"(?:model\.)?embed_tokens\.weight", "embed.weight"),
    (r"(?:model\.)?norm\.weight", "norm.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (_L + r"input_layernorm\.weight", r"layers.\1.attn_norm.weight"),
    (_L + r"post_attention_layernorm\.weight", r"layers.\1.mlp_norm.weight"),
    (_L + r"self_attn\.([qkvo])_proj\.(weight|bias)", r"layers.\1.\2_proj.\3"),
    (_L + r"mlp\.(gate|up|down)_proj\.(weight|bias)", r"layers.\1.\2_proj.\3"),
]

HF_OPT: list[tuple[str, str]] = [
    (_D + r"embed_tokens\.weight", "embed.weight"),
    (_D + r"embed_positions\.weight", "pos_embed.weight"),
    (_D + r"project_(in|out)\.weight", r"project_\1.weight"),
    (_D + r"final_layer_norm\.(weight|bias)", r"final_norm.\1"),
    (_D + r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"layers.\1.\2_proj.\3"),
    (_D + r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"layers.\1.o_proj.\2"),
    (_D + r"layers\.(\d+)\.self_attn_layer_norm\.(weight|bias)", r"layers.\1.attn_norm.\2"),
    (_D + r"layers\.(\d+)\.final_layer_norm\.(weight|bias)", r"layers.\1.mlp_norm.\2"),
    (_D + r"layers\.(\d+)\.(fc1|fc2)\.(weight|bias)", r"layers.\1.\2.\3"),
    (r"lm_head\.weight", "lm_head.weight"),
]

GGUF_LLAMA: list[tuple[str, str]] = [
    (r"token_embd\.weight", "embed.weight"),
    (r"output_norm\.weight", "norm.weight"),
    (r"output\.weight", "lm_head.weight"),
    (r"blk\.(\d+)\.attn_norm\.weight", r"layers.\1.attn_norm.weight"),
    (r"blk\.(\d+)\.ffn_norm\.weight", r"layers.\1.mlp_norm.weight"),
    (r"blk\.(\d+)\.attn_([qkv])\.(weight|bias)", r"layers.\1.\2_proj.\3"),
    (r"blk\.(\d+)\.attn_output\.(weight|bias)", r"layers.\1.o_proj.\2"),
    (r"blk\.(\d+)\.ffn_(gate|up|down)\.(weight|bias)", r"layers.\1.\2_proj.\3"),
]

HF_TABLES = {"llama": HF_LLAMA, "opt": HF_OPT}


def map_name(table: list[tuple[str, str]], name: str) -> str | None:
    for pattern, repl in table:
        m = re.fullmatch(pattern, name)
        if m:
            return m.expand(repl)
    return None


@torch.no_grad()
def load_weights(model: CausalLM, items: Iterable[tuple[str, torch.Tensor]],
                 table: list[tuple[str, str]]) -> list[str]:
    """Copy (checkpoint_name, tensor) pairs into `model`; every parameter must be filled.

    Returns the checkpoint names that were ignored (e.g. rotary buffers, a tied lm_head copy).
    """
    params = dict(model.named_parameters())
    filled: set[str] = set()
    ignored: list[str] = []
    for name, tensor in items:
        ours = map_name(table, name)
        if ours is None or (ours not in params and ours == "lm_head.weight"
                            and model.config.tie_word_embeddings):
            ignored.append(name)
            continue
        if ours not in params:
            raise KeyError(f"checkpoint tensor {name} -> {ours} has no parameter in {type(model).__name__}")
        p = params[ours]
        if tuple(tensor.shape) != tuple(p.shape):
            raise ValueError(f"{name}: shape {tuple(tensor.shape)} != expected {tuple(p.shape)}")
        p.copy_(tensor.to(device=p.device, dtype=p.dtype))
        filled.add(ours)
    missing = sorted(set(params) - filled)
    if missing:
        raise KeyError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:5]}")
    return ignored
