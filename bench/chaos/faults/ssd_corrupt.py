"""Bytes flipped in the SSD records of live conversations mid-replay (headers and payloads): a
corrupt record is a miss (the turn recomputes), never wrong KV."""
import hashlib
import os
import pathlib
import random

from bench.chaos.faults import BaseFault


class Fault(BaseFault):
    def inject(self, ctx) -> int:
        root = pathlib.Path(ctx.topo.store_data_dir) / "sessions"
        rng = random.Random(9)
        flips = 0
        for sid in ctx.sessions():
            digest = hashlib.sha256(sid.encode()).hexdigest()
            path = root / digest[:2] / f"{digest}.kv"
            try:
                size = path.stat().st_size
                if size == 0:
                    continue
                with open(path, "r+b") as f:
                    for _ in range(3):
                        offset = rng.randrange(size)
                        f.seek(offset)
                        byte = f.read(1)
                        f.seek(offset)
                        f.write(bytes([byte[0] ^ 0xFF]))
                        flips += 1
                    f.flush()
                    os.fsync(f.fileno())
            except OSError:
                continue
        if not flips:
            ctx.fault_errors.append("no SSD record of a live session to corrupt")
        return flips
