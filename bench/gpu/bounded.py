"""A child process within a time limit: SIGTERM at the limit (`bidaw` commands stop their
deployments on it), SIGKILL to its whole process group if it has not ended after a grace."""
from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/ and the packages
GRACE_S = 20.0
TAIL_CHARS = 2000


@dataclass
class Finished:
    returncode: int | None  # None: stopped at the limit
    stdout: str
    stderr: str

    def tail(self) -> str:
        return (self.stderr or self.stdout)[-TAIL_CHARS:]


def run_bounded(argv: list[str], limit_s: float, env: dict[str, str] | None = None) -> Finished:
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit_s)
        return Finished(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return Finished(None, out, err)
    except BaseException:  # interrupted (Ctrl-C, a section's alarm): leave nothing running
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
