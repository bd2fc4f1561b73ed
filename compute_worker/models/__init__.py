"""Our compact decoder-only model implementations (Llama family, OPT family) with one batched API."""
from compute_worker.models.base import CausalLM, ForwardOut
from compute_worker.models.config import ModelConfig
from compute_worker.models.kv_cache import KVCache, kv_from_token_major, kv_to_token_major
from compute_worker.models.llama import LlamaForCausalLM
from compute_worker.models.opt import OPTForCausalLM

MODEL_CLASSES: dict[str, type[CausalLM]] = {"llama": LlamaForCausalLM, "opt": OPTForCausalLM}


def build_model(config: ModelConfig, device=None, dtype=None) -> CausalLM:
    """Instantiate the right class for `config.arch` with uninitialised weights."""
    return MODEL_CLASSES[config.arch](config, device=device, dtype=dtype)


__all__ = [
    "CausalLM", "ForwardOut", "ModelConfig", "KVCache", "kv_to_token_major", "kv_from_token_major",
    "LlamaForCausalLM", "OPTForCausalLM", "MODEL_CLASSES", "build_model",
]
