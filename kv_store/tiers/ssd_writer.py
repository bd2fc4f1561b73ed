"""Background SSD writes: a pool of threads where the jobs of one session run one at a time, in
the order they were submitted (a turn's record must land after the previous turn's)."""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class OrderedWriter:
    def __init__(self, workers: int):
        self._pool = ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="ssd-write")
        self._queues: dict[str, deque] = {}  # a key is here while it has jobs queued or running
        self._lock = threading.Lock()

    def submit(self, key: str, job: Callable[[], object],
               on_cancel: Callable[[], None] | None = None) -> Future:
        """Queue `job`; `on_cancel` runs instead if it is cancelled before it starts."""
        fut: Future = Future()
        with self._lock:
            queue = self._queues.get(key)
            start = queue is None
            if start:
                queue = self._queues[key] = deque()
            queue.append((job, fut, on_cancel))
        if start:
            self._pool.submit(self._drain, key)
        return fut

    def _drain(self, key: str) -> None:
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    return
                job, fut, _ = queue[0]
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(job())
                except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                    fut.set_exception(exc)
            with self._lock:
                queue.popleft()

    def busy(self, key: str) -> bool:
        """Jobs of `key` are queued or running."""
        with self._lock:
            return key in self._queues

    def keys(self) -> set[str]:
        with self._lock:
            return set(self._queues)

    def pending(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def cancel_queued(self, key: str) -> int:
        """Cancel the jobs of `key` that have not started (running their `on_cancel`)."""
        with self._lock:
            queue = self._queues.get(key, ())
            cancelled = [cb for _, fut, cb in list(queue)[1:] if fut.cancel()]
        for cb in cancelled:
            if cb is not None:
                cb()
        return len(cancelled)

    def wait(self, key: str) -> None:
        """Until every job of `key` submitted so far has finished (or was cancelled)."""
        with self._lock:
            futs = [fut for _, fut, _ in self._queues.get(key, ())]
        for fut in futs:
            if not fut.cancelled():
                fut.exception()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
