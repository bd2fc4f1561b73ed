"""What else may lie among the SSD tier's files when a store starts: a directory or a FIFO under a
`.kv` name, a file it cannot read. The start-up scan opened each, so one such entry stopped the
store at every start (`bidaw serve: .../x.kv: Is a directory`, exit 1: the supervisor's restarts
never brought it back), and a FIFO blocked its start for good, SIGTERM included. Now each is
skipped with a WARNING, left where it is, and every good session is restored."""
from __future__ import annotations

import os
import threading

from services.runtime.gen import common_pb2
from tests.store_helpers import BPT, Stores, token_bytes

KV = common_pb2.KV_FORMAT_KV


def _start_within(stores: Stores, seconds: float):
    got: list = []
    starter = threading.Thread(target=lambda: got.append(stores()), daemon=True)
    starter.start()
    starter.join(seconds)
    assert got, f"the store did not start within {seconds} s"
    return got[0]


def test_strays_in_the_tier_are_skipped_and_good_sessions_restored(tmp_path, caplog):
    stores = Stores(tmp_path / "ssd", eviction="lru", dram_bytes=0)
    try:
        client, core = stores()
        tokens = [1, 2, 3]
        client.write("good", 0, tokens, KV, BPT, "m", token_bytes("good", tokens))
        folder = core.ssd.path("good").parent
        stores.stop(core)

        (folder / ("d" * 64 + ".kv")).mkdir()  # a directory
        os.mkfifo(folder / ("f" * 64 + ".kv"))  # a FIFO: open() would wait for a writer
        (folder / ("e" * 64 + ".kv")).symlink_to(folder / "nowhere")  # a dangling link
        caplog.set_level("WARNING", logger="bidaw.kv_store")

        client, core = _start_within(stores, 60)
        got = client.read("good")
        assert got.token_ids == tokens and got.data == token_bytes("good", tokens)
        said = [r.getMessage() for r in caplog.records if "not a regular file" in r.getMessage()]
        assert len(said) == 3, said
        for name in ("d", "f", "e"):  # left for the operator, not removed
            assert os.path.lexists(folder / (name * 64 + ".kv"))
        # The store serves as before: a new session is written and read back.
        client.write("new", 0, tokens, KV, BPT, "m", token_bytes("new", tokens))
        assert client.read("new").data == token_bytes("new", tokens)
    finally:
        stores.close()


def test_an_unreadable_session_file_does_not_stop_the_start(tmp_path, caplog, monkeypatch):
    """A file whose read fails (EIO from a bad sector, EACCES): skipped and kept, the others
    restored. The failure is injected at the scan's read of that one file."""
    stores = Stores(tmp_path / "ssd", eviction="lru", dram_bytes=0)
    try:
        client, core = stores()
        for sid in ("a", "b"):
            client.write(sid, 0, [7, 8], KV, BPT, "m", token_bytes(sid, [7, 8]))
        bad = core.ssd.path("a")
        stores.stop(core)

        from kv_store.tiers import ssd_scan
        real = ssd_scan.scan_file

        def failing(path, *args, **kwargs):
            if path == bad:
                raise OSError(5, "Input/output error")
            return real(path, *args, **kwargs)

        monkeypatch.setattr(ssd_scan, "scan_file", failing)
        caplog.set_level("WARNING", logger="bidaw.kv_store")
        client, core = _start_within(stores, 60)
        assert client.lookup("a").tier == common_pb2.TIER_NONE
        assert client.read("b").data == token_bytes("b", [7, 8])
        assert bad.exists()
        assert any("cannot read" in r.getMessage() and "Input/output error" in r.getMessage()
                   for r in caplog.records)
    finally:
        stores.close()
