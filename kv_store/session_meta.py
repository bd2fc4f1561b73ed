"""What the store knows about one session's KV, whatever tier holds the bytes."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SessionMeta:
    session_id: str
    format: int  # a KvFormat (store_state.py)
    bytes_per_token: int
    model: str
    token_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_bytes(self) -> int:
        return self.num_tokens * self.bytes_per_token

    def compatible(self, format: int, bytes_per_token: int, model: str) -> bool:
        return (self.format, self.bytes_per_token, self.model) == (format, bytes_per_token, model)

    def copy(self) -> "SessionMeta":
        return SessionMeta(self.session_id, self.format, self.bytes_per_token, self.model,
                           list(self.token_ids))
