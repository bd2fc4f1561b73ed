"""Our models in bfloat16 against transformers in bfloat16 (random-weight Llama, Qwen2 and OPT
built from a config, as in tests/test_models.py), within the tolerance docs/engine.md gives
("Choosing the dtype"): two bf16 implementations round at different points, so they agree only
to a few bf16 steps, and no worse than transformers' bf16 agrees with its own fp32."""
from __future__ import annotations

import pytest
import torch

from compute_worker.loaders.hf_loader import config_from_hf
from compute_worker.models import build_model
from compute_worker.models.weights import HF_TABLES, load_weights
from tests.test_models import CONFIGS, make_hf, run, tokens

MAX_OVER_STD = 0.05  # max |ours - transformers| over the std of the logits (measured <= 0.036)


@pytest.mark.parametrize("key", list(CONFIGS))
def test_bf16_logits_match_transformers_bf16(key):
    hf = make_hf(key)
    ids = tokens(23, 1)
    with torch.no_grad():
        exact = hf(ids[None]).logits[0].float()  # fp32: the yardstick of bf16's own error
    cfg = config_from_hf(hf.config.to_dict())
    ours = build_model(cfg, device="cpu", dtype=torch.bfloat16)
    load_weights(ours, hf.state_dict().items(), HF_TABLES[cfg.arch])
    hf = hf.to(torch.bfloat16)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0].float()
    out, _ = run(ours, ids)
    assert ours.dtype == torch.bfloat16 and out.logits.shape == ref.shape
    gap = (out.logits.float() - ref).abs()
    assert gap.max().item() <= MAX_OVER_STD * exact.std().item()
    assert gap.mean().item() <= (ref - exact).abs().mean().item()  # no worse than bf16 itself
    assert gap.max().item() > 0  # bf16 rounding shows: the comparison is not fp32 in disguise
    assert torch.equal(out.logits.argmax(-1), ref.argmax(-1))  # the same greedy tokens
