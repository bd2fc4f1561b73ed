"""The SSD directory fills up mid-replay (a real 48 MiB tmpfs under the store, filled by another
file), then frees again: the store refuses or evicts, turns are still answered (recomputed), no
KV is returned wrong. Acknowledged KV may be evicted to make room (a miss), never corrupted."""
import errno
import os
import pathlib
import subprocess
import time

from bench.chaos.faults import BaseFault


class Fault(BaseFault):
    probe_misses_allowed = True

    def setup(self, ctx) -> None:
        self.mount = pathlib.Path(ctx.workdir) / "disk"
        self.mount.mkdir(parents=True, exist_ok=True)
        self.mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs",
                                       str(self.mount)], capture_output=True).returncode == 0
        if not self.mounted:
            ctx.fault_errors.append("cannot mount a tmpfs (not root?): filling the real disk")
        ctx.topo_kwargs["store_data_dir"] = str(self.mount / "kv")

    def inject(self, ctx) -> int:
        filler = self.mount / "filler"
        filled = 0
        with open(filler, "wb") as f:
            try:
                while self.mounted or filled < (64 << 20):
                    f.write(b"\0" * (1 << 20))
                    f.flush()
                    filled += 1 << 20
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
        ctx.replay.wait_done(ctx.replay.turns * 2 // 3, timeout=120)  # turns run on a full disk
        time.sleep(1.0)
        os.unlink(filler)
        return 1

    def teardown(self, ctx) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mount)], check=False)
