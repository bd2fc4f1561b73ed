"""Who may change membership: strict member addresses, and the shared cluster token on
Register/Deregister (a real scheduler over gRPC, and the real Registrar)."""
from __future__ import annotations

import logging
import time

import grpc
import pytest

from scheduler.config import SchedulerConfig
from scheduler.main import start
from scheduler.member_address import address_problem
from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from services.runtime.membership_auth import METADATA_KEY, resolve_token
from services.runtime.registrar import Registrar

STORE = scheduler_pb2.MEMBER_KIND_STORE
TOKEN = "t0ken-with-enough-entropy"

GOOD = ["127.0.0.1:50051", "[::1]:1", "[2001:db8::7]:65535", "localhost:65535",
        "kv-store-0.kv-store.bidaw.svc:50051", "compute-0:50053", "A-1.example.COM:8"]
BAD = ["", "localhost", "127.0.0.1", ":80", "host:", "host:0", "host:65536", "host:080",
       "host:-1", "host:+1", "host:1 ", " host:1", "ho st:1", "host:1/x", "host:1\n",
       "user@host:1", "http://host:1", "dns:///host:1", "unix:/tmp/x", "unix:///tmp/x:1",
       "../../x:1", "a/b:1", "::1:80", "[::1]", "[::1]:x", "[fe80::1%eth0]:1", "[1.2.3.4]:1",
       "999.1.1.1:5", "1.2.3:5", "-host:1", "host-:1", "a..b:1", ".host:1", "host.:1",
       "h_st:1", "x" * 64 + ".com:1", "a" * 300 + ":1", "héllo:1", "host:１", "host:1:2"]


@pytest.mark.parametrize("address", GOOD)
def test_plain_host_port_addresses_pass(address):
    assert address_problem(address) is None


@pytest.mark.parametrize("address", BAD)
def test_anything_else_is_refused_with_a_reason(address):
    problem = address_problem(address)
    assert problem and len(problem) < 200


def _scheduler(token: str = ""):
    config = SchedulerConfig(listen="127.0.0.1:0", store="", workers=[], heartbeat_s=0.5,
                             cluster_token=token, metrics_listen="")
    server, service = start(config)
    return server, service, f"127.0.0.1:{server.port}"


@pytest.fixture
def guarded():
    """A scheduler that requires the cluster token."""
    server, service, target = _scheduler(TOKEN)
    with channel(target) as ch:
        yield target, scheduler_pb2_grpc.SchedulerStub(ch)
    server.stop(0)
    service.stop()


def _call(method, address: str, token: str | None, kind: int = STORE) -> grpc.StatusCode:
    metadata = ((METADATA_KEY, token),) if token is not None else None
    try:
        method(scheduler_pb2.Registration(kind=kind, address=address), timeout=5,
               metadata=metadata)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _stores(stub, token: str | None = TOKEN) -> int:
    """Stats, which needs the token too when the scheduler has one (None: the channel sends
    this process's token, which an unconfigured in-process scheduler checks if there is one)."""
    metadata = ((METADATA_KEY, token),) if token is not None else None
    return stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=5,
                      metadata=metadata).stores


def test_token_required_when_configured(guarded):
    _, stub = guarded
    for token in (None, "", "wrong", TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
        assert _call(stub.Register, "127.0.0.1:1", token) == grpc.StatusCode.UNAUTHENTICATED
    assert _stores(stub) == 0
    # bad addresses are not even looked at without the token (nothing to probe) ...
    assert _call(stub.Register, "unix:/x", None) == grpc.StatusCode.UNAUTHENTICATED
    # ... and refused with it
    assert _call(stub.Register, "unix:/x", TOKEN) == grpc.StatusCode.INVALID_ARGUMENT
    assert _call(stub.Register, "127.0.0.1:1", TOKEN) == grpc.StatusCode.OK
    assert _stores(stub) == 1


def test_deregister_needs_the_token_too(guarded):
    _, stub = guarded
    assert _call(stub.Register, "127.0.0.1:2", TOKEN) == grpc.StatusCode.OK
    assert _call(stub.Deregister, "127.0.0.1:2", None) == grpc.StatusCode.UNAUTHENTICATED
    assert _call(stub.Deregister, "127.0.0.1:2", "nope") == grpc.StatusCode.UNAUTHENTICATED
    assert _stores(stub) == 1  # an outsider cannot remove a member
    assert _call(stub.Deregister, "../../x:1", TOKEN) == grpc.StatusCode.INVALID_ARGUMENT
    assert _call(stub.Deregister, "127.0.0.1:2", TOKEN) == grpc.StatusCode.OK
    assert _stores(stub) == 0


def test_bad_addresses_refused_over_grpc_and_change_nothing():
    server, service, target = _scheduler()  # no token: anyone may register, but strictly
    try:
        with channel(target) as ch:
            stub = scheduler_pb2_grpc.SchedulerStub(ch)
            for address in BAD:
                for method in (stub.Register, stub.Deregister):
                    assert _call(method, address, None) == grpc.StatusCode.INVALID_ARGUMENT, \
                        address
            assert _stores(stub, None) == 0
            assert _call(stub.Register, "[::1]:3", None) == grpc.StatusCode.OK
            assert _stores(stub, None) == 1
    finally:
        server.stop(0)
        service.stop()


def _wait(predicate, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_registrar_sends_the_token_and_a_wrong_one_is_reported(guarded, caplog):
    target, stub = guarded
    member = Registrar(target, STORE, "127.0.0.1:4", token=TOKEN).start()
    try:
        assert _wait(lambda: _stores(stub) == 1)  # joined, with the token as metadata
    finally:
        member.stop()  # a clean leave: Deregister with the token
    assert _wait(lambda: _stores(stub) == 0)
    with caplog.at_level(logging.WARNING, logger="bidaw.membership"):
        intruder = Registrar(target, STORE, "127.0.0.1:5", token="guess").start()
        try:
            assert _wait(lambda: "UNAUTHENTICATED" in caplog.text)
            assert _stores(stub) == 0
        finally:
            intruder.stop()
    assert "guess" not in caplog.text and TOKEN not in caplog.text  # never logged


def test_token_from_a_file_and_bad_settings(tmp_path):
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")
    assert resolve_token("", str(path)) == TOKEN
    assert resolve_token(TOKEN, "") == TOKEN and resolve_token("", "") == ""
    for token, file, flag in [(TOKEN, str(path), "both"),
                              ("", str(tmp_path / "missing"), "--cluster-token-file"),
                              ("bad token\x01", "", "--cluster-token"),
                              ("", str(tmp_path), "--cluster-token-file")]:
        with pytest.raises(ValueError, match=flag):
            resolve_token(token, file)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        resolve_token("", str(tmp_path / "empty"))


def test_serve_refuses_an_unreadable_token_file_at_start(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "services.cli.main", "serve", "scheduler",
                          "--listen", "127.0.0.1:0", "--cluster-token-file",
                          str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "bidaw serve scheduler: --cluster-token-file" in out.stderr
