"""What the fast fuzzer saw for one class of inputs (HTTP) or one method (gRPC)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClassTally:
    inputs: int = 0
    statuses: dict = field(default_factory=dict)
    crashes: list = field(default_factory=list)  # first few, described
    crash_count: int = 0
    unclear: int = 0  # a 4xx without the {"error": {...}} body

    def saw(self, status, crash: str = "") -> None:
        self.inputs += 1
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
        if crash:
            self.crash_count += 1
            if len(self.crashes) < 5:
                self.crashes.append(crash)
