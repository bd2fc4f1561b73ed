"""The SSD (capacity) tier: one append-only file of records per session.

A turn appends one record (its new tokens' KV) and fsyncs before the write is acknowledged. A turn
whose history diverged from what is stored rewrites the file to a temporary name and renames it
over the old one, so a crash leaves either the old file or the new one, never a mix. File names
are a hash of the session id, so no id can name a path outside the data directory.
"""
from __future__ import annotations

import hashlib
import os
import pathlib

from . import ssd_record
from .session_meta import SessionMeta
from .ssd_record import CorruptRecord


class SsdTier:
    def __init__(self, root: str | os.PathLike):
        self.root = pathlib.Path(root)
        (self.root / "sessions").mkdir(parents=True, exist_ok=True)
        self.file_bytes: dict[str, int] = {}  # session -> bytes its file holds

    @property
    def used_bytes(self) -> int:
        return sum(self.file_bytes.values())

    def path(self, session_id: str) -> pathlib.Path:
        digest = hashlib.sha256(session_id.encode()).hexdigest()
        return self.root / "sessions" / digest[:2] / f"{digest}.kv"

    # -- start-up ---------------------------------------------------------------------------

    def scan(self) -> list[SessionMeta]:
        """Rebuild the index from the files; cut torn or corrupt tails off (never acknowledged)."""
        metas = []
        for path in sorted((self.root / "sessions").glob("*/*.kv")):
            meta, good_len = self._scan_file(path)
            if meta is None:
                path.unlink(missing_ok=True)
                continue
            if good_len < path.stat().st_size:
                with open(path, "r+b") as fh:
                    fh.truncate(good_len)
                    os.fsync(fh.fileno())
            self.file_bytes[meta.session_id] = good_len
            metas.append(meta)
        for tmp in (self.root / "sessions").glob("*/*.tmp"):
            tmp.unlink(missing_ok=True)  # a rewrite that never got renamed into place
        return metas

    def _scan_file(self, path: pathlib.Path) -> tuple[SessionMeta | None, int]:
        meta: SessionMeta | None = None
        offset = 0
        size = path.stat().st_size
        with open(path, "rb") as fh:
            while offset < size:
                fh.seek(offset)
                head = fh.read(ssd_record.FIXED_SIZE + 65536)
                try:
                    header, var_end = ssd_record.decode_header(head)
                except CorruptRecord:
                    try:  # the token ids may run past the first read
                        fh.seek(offset)
                        header, var_end = ssd_record.decode_header(fh.read(size - offset))
                    except CorruptRecord:
                        break
                end = offset + var_end + header.payload_len
                if end > size or (meta is not None and not self._extends(meta, header)):
                    break
                if meta is None:
                    if header.start_token != 0 or self.path(header.session_id) != path:
                        break
                    meta = SessionMeta(header.session_id, header.format, header.bytes_per_token,
                                       header.model, [])
                meta.token_ids.extend(header.token_ids)
                offset = end
        return meta, offset

    @staticmethod
    def _extends(meta: SessionMeta, header: ssd_record.RecordHeader) -> bool:
        return (header.session_id == meta.session_id and header.start_token == meta.num_tokens
                and meta.compatible(header.format, header.bytes_per_token, header.model))

    # -- I/O --------------------------------------------------------------------------------

    def append(self, meta: SessionMeta, start_token: int, token_ids: list[int],
               payload: bytes | memoryview, stored_payload: bytes | None = None) -> int:
        """Store tokens [start_token, ...) of `meta`'s session; durable when this returns.

        `meta` describes the session before the write. Appending (start == stored tokens) adds a
        record; anything else rewrites the file from the kept prefix (`stored_payload`, read by
        the caller when it is not given) plus the new record. Returns the bytes written.
        """
        record = ssd_record.encode(meta.session_id, meta.format, start_token,
                                   meta.bytes_per_token, meta.model, token_ids, payload)
        path = self.path(meta.session_id)
        path.parent.mkdir(exist_ok=True)
        if start_token == meta.num_tokens and meta.num_tokens > 0 and path.exists():
            old_size = self.file_bytes.get(meta.session_id, path.stat().st_size)
            try:
                with open(path, "ab") as fh:
                    fh.write(record)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError:
                with open(path, "r+b") as fh:  # leave no partial record behind
                    fh.truncate(old_size)
                raise
            self.file_bytes[meta.session_id] = old_size + len(record)
            return len(record)
        prefix = b""
        if start_token > 0:
            kept = stored_payload if stored_payload is not None else self.read(meta)
            prefix = ssd_record.encode(meta.session_id, meta.format, 0, meta.bytes_per_token,
                                       meta.model, meta.token_ids[:start_token],
                                       kept[:start_token * meta.bytes_per_token])
        self._write_atomically(path, prefix + record)
        self.file_bytes[meta.session_id] = len(prefix) + len(record)
        return len(prefix) + len(record)

    def _write_atomically(self, path: pathlib.Path, data: bytes) -> None:
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def read(self, meta: SessionMeta, max_tokens: int = 0) -> bytes:
        """The session's KV bytes (first `max_tokens` tokens if > 0), every checksum verified."""
        data = self.path(meta.session_id).read_bytes()
        want = meta.num_tokens if max_tokens <= 0 else min(max_tokens, meta.num_tokens)
        out = bytearray()
        offset, tokens = 0, 0
        view = memoryview(data)
        while tokens < want:
            header, var_end = ssd_record.decode_header(view, offset)
            payload = view[var_end:var_end + header.payload_len]
            ssd_record.check_payload(header, payload)
            if header.session_id != meta.session_id or header.start_token != tokens:
                raise CorruptRecord(f"records of session {meta.session_id!r} out of order")
            take = min(header.num_tokens, want - tokens)
            out += payload[:take * header.bytes_per_token]
            tokens += header.num_tokens
            offset = var_end + header.payload_len
        return bytes(out)

    def delete(self, session_id: str) -> int:
        """Remove the session's file; returns the bytes freed."""
        self.path(session_id).unlink(missing_ok=True)
        return self.file_bytes.pop(session_id, 0)
