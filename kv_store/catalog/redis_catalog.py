"""The catalog in Redis: store replicas over one data directory, and restarts, share one view.

    {ns}:kv:sessions      set of session ids
    {ns}:kv:s:{session}   hash: fmt, bpt, model, dt (dtype; absent: UNKNOWN), tokens (int32 LE),
                          len, ver
    {ns}:kv:lock:{session} a writer's token while it appends (expires if the writer dies)
    {ns}:kv:epoch         a token set when the index is first filled: gone when Redis lost it

A write takes the session's lock, re-reads the entry (another replica may have appended), writes
at the committed end, fsyncs, then publishes the entry with the next version: two replicas never
write the same file at once, and a reader that sees a version sees bytes that are on disk.
"""
from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from typing import Callable, Iterator, TypeVar

import numpy as np
import redis

from kv_store import errors
from kv_store.catalog.base import Catalog, CatalogEntry
from kv_store.catalog.reconcile import reconcile
from kv_store.session_meta import SessionMeta
from kv_store.tiers.ssd import SsdTier

_UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end " \
          "return 0"
log = logging.getLogger("bidaw.kv_store")
T = TypeVar("T")
# Connection refused or reset, timeouts, a Redis still loading its data: worth another try.
_TRANSIENT = (redis.ConnectionError, redis.TimeoutError)


class _Damaged(Exception):
    """An index entry that does not parse."""


class RedisCatalog(Catalog):
    kind = "redis"

    def __init__(self, url: str, namespace: str = "bidaw", lock_ttl_s: float = 120.0,
                 lock_wait_s: float = 60.0, retries: int = 4, retry_first_s: float = 0.1,
                 epoch_check_s: float = 2.0):
        self.url = url
        self.ns = f"{namespace}:kv"
        self.lock_ttl_ms = int(lock_ttl_s * 1000)
        self.lock_wait_s = lock_wait_s
        self.retries = retries
        self.retry_first_s = retry_first_s
        self.epoch_check_s = epoch_check_s
        self._epoch: bytes | None = None  # set by load()
        self._epoch_checked = time.monotonic()
        self._epoch_lock = threading.Lock()
        self._ssd: SsdTier | None = None  # set by load(): from then on the epoch is watched
        self.reconciled = threading.Event()  # set after each background reconciliation
        self.r = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=3)
        kwargs = self.r.connection_pool.connection_kwargs  # where, without any password
        self.where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        self._call("ping", self.r.ping)  # fail at start-up, not at the first write
        self._unlock = self.r.register_script(_UNLOCK)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()`, retried with backoff while Redis is unreachable; then UNAVAILABLE."""
        pause = self.retry_first_s
        for attempt in range(self.retries + 1):
            try:
                result = fn()
                self._maybe_check_epoch()
                return result
            except _TRANSIENT as exc:
                if attempt == self.retries:
                    raise errors.unavailable(
                        f"the session index (Redis at {self.where}) is unreachable ({what}: "
                        f"{exc}); retry later") from None
            except redis.RedisError as exc:  # refused (out of memory, read-only ...): no retry
                raise errors.unavailable(f"the session index (Redis at {self.where}) refused "
                                         f"{what}: {exc}") from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        raise AssertionError("unreachable")

    def _maybe_check_epoch(self) -> None:
        """Every `epoch_check_s`: if Redis lost the index (restarted without persistence), put
        the files back into it, on a thread of its own (a reconciliation takes the locks)."""
        if self._ssd is None or time.monotonic() - self._epoch_checked < self.epoch_check_s:
            return
        with self._epoch_lock:
            if time.monotonic() - self._epoch_checked < self.epoch_check_s:
                return
            self._epoch_checked = time.monotonic()
            try:
                lost = self.r.get(self._epoch_key) != self._epoch
            except _TRANSIENT:
                return  # the next call tries again
            if lost:
                self._epoch_checked = float("inf")  # no second one while this one runs
        if lost:
            log.warning("the session index in Redis at %s was lost (Redis restarted without "
                        "its data?): reconciling it with the files", self.where)
            threading.Thread(target=self._reconcile_again, name="index-reconcile",
                             daemon=True).start()

    def _reconcile_again(self) -> None:
        try:
            self._take_epoch()
            reconcile(self, self._ssd, self._read_all(), live=True)
        except errors.StoreError as exc:
            log.warning("reconciling the index failed (%s); retrying later", exc.message)
        finally:
            self._epoch_checked = time.monotonic()
            self.reconciled.set()

    @property
    def _epoch_key(self) -> str:
        return f"{self.ns}:epoch"

    def _take_epoch(self) -> None:
        """This index's epoch: the one already there (another replica's), else a new one."""
        self._call("epoch", lambda: self.r.set(self._epoch_key, secrets.token_hex(8), nx=True))
        self._epoch = self._call("epoch", lambda: self.r.get(self._epoch_key))

    def _key(self, session_id: str) -> str:
        return f"{self.ns}:s:{session_id}"

    @staticmethod
    def _decode(session_id: str, h) -> CatalogEntry | None:
        """The entry of a HGETALL reply (None: no entry); _Damaged for one that does not parse
        (a field missing or garbled, or a key of another type: a reply that is an error)."""
        if isinstance(h, Exception):
            raise _Damaged(f"{type(h).__name__}: {h}")
        if not h:
            return None
        try:
            tokens = np.frombuffer(h[b"tokens"], dtype="<i4").tolist()
            meta = SessionMeta(session_id, int(h[b"fmt"]), int(h[b"bpt"]), h[b"model"].decode(),
                               tokens, int(h.get(b"dt", 0)))  # none: from before dtypes
            return CatalogEntry(meta, int(h[b"len"]), int(h[b"ver"]))
        except (KeyError, ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
            raise _Damaged(f"{type(exc).__name__}: {exc}") from None

    def _drop_damaged(self, session_id: str, why: _Damaged) -> None:
        """Forget an entry that does not parse: the session's file, if its records check out,
        is adopted again by reconcile (its records describe themselves); else a miss."""
        log.warning("index entry of %r is damaged (%s): dropped", session_id, why)
        self.delete(session_id)

    def load(self, ssd: SsdTier) -> list[CatalogEntry]:
        self._take_epoch()
        kept = reconcile(self, ssd, self._read_all())
        self._ssd = ssd
        return kept

    def _read_all(self) -> list[CatalogEntry]:
        entries = []
        members = self._call("load", lambda: list(self.r.sscan_iter(f"{self.ns}:sessions",
                                                                     count=1000)))
        ids = []
        for m in members:
            try:
                ids.append(m.decode())
            except UnicodeDecodeError:  # no session id is: ours are checked as UTF-8
                log.warning("index lists a session id that is not UTF-8 (%r): dropped", m)
                self._call("load", lambda m=m: self.r.srem(f"{self.ns}:sessions", m))
        for i in range(0, len(ids), 1000):
            batch = ids[i:i + 1000]

            def fetch():
                pipe = self.r.pipeline(transaction=False)
                for sid in batch:
                    pipe.hgetall(self._key(sid))
                return pipe.execute(raise_on_error=False)  # one bad key spoils no other
            for sid, h in zip(batch, self._call("load", fetch)):
                try:
                    entry = self._decode(sid, h)
                except _Damaged as why:
                    self._drop_damaged(sid, why)
                    continue
                if entry is not None:
                    entries.append(entry)
        return entries

    def _reply(self, what: str, queue: Callable) -> object:
        """One command's reply, an error reply (a key of another type) returned, not raised."""
        def fetch():
            pipe = self.r.pipeline(transaction=False)
            queue(pipe)
            return pipe.execute(raise_on_error=False)[0]
        return self._call(what, fetch)

    def get(self, session_id: str) -> CatalogEntry | None:
        try:
            return self._decode(session_id, self._reply(
                "get", lambda pipe: pipe.hgetall(self._key(session_id))))
        except _Damaged as why:
            self._drop_damaged(session_id, why)
            return None

    def version(self, session_id: str) -> int | None:
        """The entry's version alone (one field: asked on every read); None for no entry, or
        one that does not parse (`get` then drops it)."""
        ver = self._reply("version", lambda pipe: pipe.hget(self._key(session_id), "ver"))
        try:
            return None if ver is None or isinstance(ver, Exception) else int(ver)
        except ValueError:
            return None

    def put(self, entry: CatalogEntry) -> None:
        meta = entry.meta
        fields = {"fmt": int(meta.format), "bpt": meta.bytes_per_token, "model": meta.model,
                  "dt": int(meta.dtype),
                  "tokens": np.asarray(meta.token_ids, dtype="<i4").tobytes(),
                  "len": entry.ssd_len, "ver": entry.version}

        def write():  # a transaction: retrying it whole is safe
            pipe = self.r.pipeline(transaction=True)
            pipe.hset(self._key(meta.session_id), mapping=fields)
            pipe.sadd(f"{self.ns}:sessions", meta.session_id)
            pipe.execute()
        self._call("put", write)

    def delete(self, session_id: str) -> None:
        def write():
            pipe = self.r.pipeline(transaction=True)
            pipe.delete(self._key(session_id))
            pipe.srem(f"{self.ns}:sessions", session_id)
            pipe.execute()
        self._call("delete", write)

    @contextlib.contextmanager
    def lock(self, session_id: str) -> Iterator[None]:
        key, token = f"{self.ns}:lock:{session_id}", secrets.token_hex(8)
        deadline = time.monotonic() + self.lock_wait_s
        pause = 0.002
        while not self._call("lock", lambda: self.r.set(key, token, nx=True,
                                                        px=self.lock_ttl_ms)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {session_id!r} is locked by another store replica")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        try:
            yield
        finally:
            try:
                self._call("unlock", lambda: self._unlock(keys=[key], args=[token]))
            except errors.StoreError as exc:  # the lock expires on its own
                log.warning("%s", exc.message)

    def close(self) -> None:
        self.r.close()
