"""Load a local Hugging Face checkpoint directory (config.json + *.safetensors) into our models."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from compute_worker.loaders.device import pick_device, pick_dtype
from compute_worker.models import CausalLM, ModelConfig, build_model
from compute_worker.models.weights import HF_TABLES, load_weights
from compute_worker.tokenizer import ChatTokenizer

LLAMA_LIKE = {"llama", "mistral", "qwen2", "smollm", "smollm2", "smollm3"}


def _eos_list(v: Any) -> list[int]:
    return [] if v is None else [int(x) for x in (v if isinstance(v, list) else [v])]


def config_from_hf(d: dict[str, Any], name: str = "") -> ModelConfig:
    """Translate a transformers config dict (config.json / PretrainedConfig.to_dict())."""
    mt = d.get("model_type", "")
    common = dict(vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
                  num_layers=d["num_hidden_layers"], bos_token_id=d.get("bos_token_id"),
                  eos_token_ids=_eos_list(d.get("eos_token_id")),
                  name=name or d.get("_name_or_path", "") or mt)
    if mt == "opt":
        if (not d.get("enable_bias", True) or not d.get("layer_norm_elementwise_affine", True)
                or d.get("_remove_final_layer_norm", False)):
            raise NotImplementedError("OPT without biases / affine LayerNorm / final LayerNorm")
        heads = d["num_attention_heads"]
        return ModelConfig(
            arch="opt", intermediate_size=d["ffn_dim"], num_heads=heads, num_kv_heads=heads,
            head_dim=d["hidden_size"] // heads, max_position=d["max_position_embeddings"],
            layer_norm_eps=1e-5, hidden_act=d.get("activation_function", "relu"),
            tie_word_embeddings=d.get("tie_word_embeddings", True),
            word_embed_proj_dim=d.get("word_embed_proj_dim") or d["hidden_size"],
            do_layer_norm_before=d.get("do_layer_norm_before", True), **common)
    if mt not in LLAMA_LIKE:
        raise NotImplementedError(f"model_type {mt!r}")
    heads = d["num_attention_heads"]
    rope_scaling = d.get("rope_scaling")
    rope_theta = d.get("rope_theta")
    rp = d.get("rope_parameters")  # transformers 5 moves theta/scaling here
    if isinstance(rp, dict):
        rope_theta = rp.get("rope_theta", rope_theta)
        if rp.get("rope_type", "default") != "default":
            rope_scaling = rp
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) == "default":
        rope_scaling = None
    qwen = mt == "qwen2"
    bias = bool(d.get("attention_bias", False))
    return ModelConfig(
        arch="llama", intermediate_size=d["intermediate_size"], num_heads=heads,
        num_kv_heads=d.get("num_key_value_heads") or heads,
        head_dim=d.get("head_dim") or d["hidden_size"] // heads,
        max_position=d.get("max_position_embeddings", 4096), rms_norm_eps=d.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope_theta or 10000.0), rope_scaling=rope_scaling,
        attention_bias=True if qwen else bias, attention_out_bias=False if qwen else bias,
        mlp_bias=bool(d.get("mlp_bias", False)), hidden_act=d.get("hidden_act", "silu"),
        tie_word_embeddings=d.get("tie_word_embeddings", False), **common)


def _iter_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    for f in files:  # sharded or single file: the index json is not needed to read every shard
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():
                yield key, st.get_tensor(key)


def _generation_eos(path: Path) -> list[int]:
    gc = path / "generation_config.json"
    return _eos_list(json.loads(gc.read_text()).get("eos_token_id")) if gc.exists() else []


def load_hf_dir(path: str | Path, device: torch.device | str | None = None,
                dtype: torch.dtype | None = None) -> tuple[CausalLM, ChatTokenizer | None]:
    device = device or pick_device()
    dtype = dtype or pick_dtype(device)
    path = Path(path)
    cfg = config_from_hf(json.loads((path / "config.json").read_text()), name=path.name)
    for e in _generation_eos(path):
        if e not in cfg.eos_token_ids:
            cfg.eos_token_ids.append(e)
    model = build_model(cfg, device=device, dtype=dtype)
    load_weights(model, _iter_safetensors(path), HF_TABLES[cfg.arch])
    model.eval()
    tok = ChatTokenizer.from_hf_dir(path, eos_token_ids=cfg.eos_token_ids) \
        if (path / "tokenizer.json").exists() else None
    return model, tok
