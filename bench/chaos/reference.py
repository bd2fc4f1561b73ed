"""The recompute reference: every answer computed again in this process, from scratch (no KV
store), with the same model and greedy decoding. Served answers must equal it token for token."""
from __future__ import annotations

from services.runtime.gen import common_pb2


class Reference:
    def __init__(self, model_name: str = "smollm2-135m"):
        self.model_name = model_name
        self._engine = None
        self._cache: dict[tuple, list[int]] = {}

    def _load(self):
        if self._engine is None:
            import torch

            from compute_worker.engine import Engine
            from compute_worker.store_connector import make_connector
            from compute_worker.turn_runner import TurnRunner
            from compute_worker.loaders.registry import load_model

            torch.set_num_threads(1)
            model, tok = load_model(self.model_name, device="cpu")
            self._engine = TurnRunner(Engine(model), make_connector(None, model, "chaos-ref", 1), tok)
        return self._engine

    def answer(self, prompt: list[int], max_tokens: int) -> list[int]:
        key = (tuple(prompt), max_tokens)
        if key not in self._cache:
            engine = self._load()
            self._cache[key] = [i for ids, _, _ in engine.run(common_pb2.TurnRequest(
                session_id=f"ref-{len(self._cache)}", prompt_token_ids=prompt,
                max_tokens=max_tokens, ignore_eos=True)) for i in ids]
        return self._cache[key]
