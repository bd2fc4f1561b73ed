"""One model per scheduler: a compute worker of another model is not let in. Turns of one
conversation go to any worker; with two models they would be answered by both (the store keeps
KV apart by model, answers are not). The model is what the KV store keys KV by (WorkerInfo.model:
the model's name, with its weight format unless dense); its KV dtype is no part of it (a worker
of another dtype decides itself whether to reuse KV: compute_worker/dtype_reuse.py).

Which model: the first worker's, while any worker of it is a member: a registered one while it
heartbeats, a --workers one always, down or not (while it restarted, a worker of another model
could register, take the model and have the configured one refused when back); once none is
left, the next worker to join sets it. So a rolling upgrade to a new model is: stop the old
registered workers (or let them deregister), restart the --workers ones with the new model; the
new ones, refused until then and retrying at every heartbeat (or Info), join within one. A worker
that does not say its model (one from before Registration.model) is accepted with a WARNING, and
checked when its Info says.
"""
from __future__ import annotations

from services.runtime.gen import common_pb2

MAX_MODEL_BYTES = 256


def model_problem(model: str, kv_dtype: int) -> str:
    """Why a Registration's model or KV dtype cannot be taken ("" when it can)."""
    if len(model.encode()) > MAX_MODEL_BYTES:
        return f"model is {len(model.encode())} bytes; at most {MAX_MODEL_BYTES}"
    if any(not c.isprintable() for c in model):
        return f"model {model[:64]!r} holds control characters"
    if kv_dtype not in common_pb2.KVDtype.values():
        return f"kv_dtype {kv_dtype} is no KVDtype"
    return ""


def dtype_name(kv_dtype: int) -> str:
    return common_pb2.KVDtype.Name(kv_dtype).removeprefix("KV_DTYPE_").lower()


def clash(address: str, model: str, serving: str, serving_at: list[str]) -> str:
    """The refusal of a worker at `address` of `model`, the others serving `serving`."""
    shown = ", ".join(serving_at[:4]) + (f" and {len(serving_at) - 4} more"
                                         if len(serving_at) > 4 else "")
    return (f"worker {address} serves model {model!r}, but this scheduler's workers serve "
            f"{serving!r} ({shown}): one model per scheduler, or turns of one conversation "
            "would be answered by both. It joins once no worker of "
            f"{serving!r} is left (stop them all to change models)")
