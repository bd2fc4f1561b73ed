"""What the store knows about one session's KV, whatever tier holds the bytes.

Its identity (format, bytes_per_token, model, dtype): a write that extends the session must
match it; one from token 0 replaces it. The store only compares it: which KV a worker may reuse,
and how (converting another dtype, or recomputing), the worker decides from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SessionMeta:
    session_id: str
    format: int  # a KvFormat (store_state.py)
    bytes_per_token: int
    model: str
    token_ids: list[int] = field(default_factory=list)
    dtype: int = 0  # a KvDtype (store_state.py); 0, UNKNOWN: the writer did not say

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_bytes(self) -> int:
        return self.num_tokens * self.bytes_per_token

    def compatible(self, format: int, bytes_per_token: int, model: str, dtype: int) -> bool:
        return ((self.format, self.bytes_per_token, self.model, self.dtype)
                == (format, bytes_per_token, model, dtype))

    def copy(self) -> "SessionMeta":
        return SessionMeta(self.session_id, self.format, self.bytes_per_token, self.model,
                           list(self.token_ids), self.dtype)
