"""Architecture-neutral model configuration shared by models, loaders, KV store sizing and the scheduler."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    arch: str  # "llama" (Llama/Mistral/Qwen2/SmolLM) | "opt"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position: int  # context length
    rms_norm_eps: float = 1e-5  # llama
    layer_norm_eps: float = 1e-5  # opt
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # None | {"rope_type": "linear"|"llama3", ...}
    attention_bias: bool = False  # q/k/v biases (Qwen2); OPT always has biases
    attention_out_bias: bool = False  # o_proj bias (HF Llama's attention_bias sets both)
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"  # llama: silu (SwiGLU); opt: relu
    # OPT only
    word_embed_proj_dim: int | None = None  # != hidden_size means project_in/out exist (opt-350m)
    do_layer_norm_before: bool = True
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    name: str = ""

    def __post_init__(self) -> None:
        if self.arch not in ("llama", "opt"):
            raise ValueError(f"unsupported arch {self.arch!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * dtype_bytes

    def hidden6_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.num_layers * self.hidden_size * dtype_bytes
