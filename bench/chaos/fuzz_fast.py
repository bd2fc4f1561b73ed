"""The fast fuzzer: 100,000+ malformed inputs in minutes against a real deployment.

HTTP (here): raw requests of each class of fuzz_inputs.py, sent concurrently over asyncio sockets (so
any header byte can be sent). A refusal costs the gateway well under a millisecond, so the rate
is bounded by the client and the machine. Passing: every request gets an answer, never a 5xx
(503 shedding aside), and every 4xx carries the OpenAI error object.

gRPC: every method of every service, in fuzz_grpc_fast.py.
"""
from __future__ import annotations

import asyncio
import json
import random
import time

from bench.chaos.fuzz_inputs import CLASSES, generate
from bench.chaos.fuzz_tally import ClassTally


async def _send(host: str, port: int, raw: bytes, timeout: float) -> tuple[int, bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _brief(raw: bytes) -> str:
    """The request line, the headers after the fixed ones, and the body's start."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    extra = [h for h in lines[1:] if not h.split(b":")[0] in (
        b"Host", b"Connection", b"Content-Type", b"Content-Length")]
    return repr(b" ".join([lines[0], *extra]) + b" " + body[:100] + b" ... " + body[-40:])


def _clear_error(body: bytes) -> bool:
    try:
        return set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    except (ValueError, KeyError, TypeError):
        return False


async def _http(host: str, port: int, per_class: int, api_key: str, concurrency: int,
                seed: int, timeout: float) -> dict[str, ClassTally]:
    tallies = {c: ClassTally() for c in CLASSES}
    jobs = [(c, i) for i in range(per_class) for c in CLASSES]
    rng = random.Random(seed)
    rng.shuffle(jobs)
    queue = iter(jobs)

    async def worker(n: int) -> None:
        local = random.Random(seed * 1000 + n)
        for cls, _ in queue:
            raw = generate(cls, local, api_key)
            try:
                status, body = await _send(host, port, raw, timeout)
            except (OSError, asyncio.TimeoutError, ValueError, IndexError) as exc:
                tallies[cls].saw("no answer", f"{type(exc).__name__} for {_brief(raw)}")
                continue
            crash = f"HTTP {status} for {_brief(raw)}" if status >= 500 and status != 503 else ""
            tallies[cls].saw(status, crash)
            if 400 <= status < 500 and not _clear_error(body):
                tallies[cls].unclear += 1

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return tallies


def fuzz_http_fast(host: str, port: int, per_class: int, api_key: str = "",
                   concurrency: int = 32, seed: int = 0,
                   timeout: float = 60.0) -> dict[str, ClassTally]:
    return asyncio.run(_http(host, port, per_class, api_key, concurrency, seed, timeout))


def summary(http: dict[str, ClassTally], grpc_: dict[str, ClassTally], seconds: float) -> dict:
    """The JSON figures of one run."""
    def part(tallies):
        return {k: {"inputs": t.inputs, "statuses": t.statuses, "crashes": t.crash_count,
                    "unclear_errors": t.unclear, "first_crashes": t.crashes}
                for k, t in sorted(tallies.items())}

    inputs = sum(t.inputs for t in (*http.values(), *grpc_.values()))
    return {"inputs": inputs, "duration_s": round(seconds, 1),
            "inputs_per_s": round(inputs / seconds, 1) if seconds else 0.0,
            "http_5xx_or_no_answer": sum(t.crash_count for t in http.values()),
            "http_unclear_errors": sum(t.unclear for t in http.values()),
            "grpc_unknown_internal_or_hang": sum(t.crash_count for t in grpc_.values()),
            "http": part(http), "grpc": part(grpc_)}


def fuzz_fast_live(http_per_class: int, grpc_per_method: int, turn_methods: int,
                   seed: int = 0, concurrency: int = 32, verbose: bool = False) -> dict:
    """A fresh embedded deployment and a scheduler of its own; the figures."""
    import sys
    import tempfile

    from scheduler.config import SchedulerConfig
    from scheduler.main import start as start_scheduler
    from services.launch.launcher import LocalDeployment

    from bench.chaos.fuzz_grpc_fast import fuzz_grpc_fast

    with tempfile.TemporaryDirectory(prefix="chaos-fuzz-fast-") as d:
        with LocalDeployment(data_dir=d, dram_bytes="4MiB", default_max_tokens=2) as dep:
            own, _ = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store="", workers=[]))
            try:
                start = time.perf_counter()
                http = fuzz_http_fast(dep.host, dep.gateway_port, http_per_class,
                                      concurrency=concurrency, seed=seed)
                if verbose:
                    print(f"[chaos] fast fuzz http: {sum(t.inputs for t in http.values())} "
                          f"inputs in {time.perf_counter() - start:.0f} s", file=sys.stderr,
                          flush=True)
                grpc_ = fuzz_grpc_fast({"store": dep.store_target, "worker": dep.worker_target,
                                        "scheduler": dep.scheduler_target},
                                       f"127.0.0.1:{own.port}", grpc_per_method, turn_methods,
                                       seed=seed)
                seconds = time.perf_counter() - start
            finally:
                own.stop(0)
            out = summary(http, grpc_, seconds)
            out["processes_died"] = [n for n, p in dep.procs if p.poll() is not None]
    return out
