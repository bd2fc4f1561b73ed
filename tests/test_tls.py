"""TLS and mutual TLS between the services: real servers, real certificates (from `bidaw certs`
into a temporary directory), real handshakes; and clear errors for settings that cannot work."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest

from services.cli.main import main as bidaw
from services.cli.certs import make_certs
from services.runtime.gen import kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import Server, channel, wait_healthy
from services.launch.launcher import free_port
from services.runtime.tls import TLSConfigError, TLSFiles, load
from tests.cluster import token_file

REFUSED = grpc.StatusCode.UNAVAILABLE  # a failed handshake never reaches the service


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Two unrelated dev CAs, each with its server+client certificate."""
    root = tmp_path_factory.mktemp("pki")
    make_certs(str(root / "a"), ["store.example"])
    make_certs(str(root / "b"), [])
    return TLSFiles.from_dir(str(root / "a")), TLSFiles.from_dir(str(root / "b"))


def _store_stats(target: str, tls) -> grpc.StatusCode:
    with channel(target, tls) as ch:
        try:
            kv_store_pb2_grpc.KVStoreStub(ch).Stats(kv_store_pb2.StoreStatsRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def mtls_store(pki, tmp_path_factory):
    """`bidaw serve store` as its own process with --tls-cert/--tls-key/--tls-ca (mTLS)."""
    a, _ = pki
    data = tmp_path_factory.mktemp("store")
    target = f"127.0.0.1:{free_port()}"
    log = open(data / "store.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "serve", "store", "--listen", target,
         "--data-dir", str(data / "kv"), "--dram-bytes", "8MiB", "--ssd-bytes", "64MiB",
         "--tls-cert", a.cert, "--tls-key", a.key, "--tls-ca", a.ca,
         "--cluster-token-file", token_file(data)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(target, 60, alive=lambda: proc.poll() is None, tls=a)
        yield target
    finally:
        proc.terminate()
        proc.wait(20)


def test_mtls_store_serves_a_client_with_a_certificate_from_its_ca(mtls_store, pki):
    a, _ = pki
    assert _store_stats(mtls_store, a) == grpc.StatusCode.OK


def test_mtls_store_refuses_plaintext_no_client_cert_and_another_ca(mtls_store, pki):
    a, b = pki
    assert _store_stats(mtls_store, None) == REFUSED  # plaintext
    assert _store_stats(mtls_store, TLSFiles(ca=a.ca)) == REFUSED  # TLS, but no client cert
    assert _store_stats(mtls_store, b) == REFUSED  # another CA: neither side trusts the other
    # a client certificate the server's CA did not sign, even if the client trusts the server
    assert _store_stats(mtls_store, TLSFiles(b.cert, b.key, a.ca)) == REFUSED
    # the name checked must be in the server's certificate (here: as an override)
    assert _store_stats(mtls_store, TLSFiles(a.cert, a.key, a.ca, server_name="nope")) == REFUSED
    assert _store_stats(mtls_store, TLSFiles(a.cert, a.key, a.ca, server_name="store.example")) \
        == grpc.StatusCode.OK


def test_tls_without_client_auth_when_the_server_has_no_ca(pki):
    a, b = pki
    server = Server("127.0.0.1:0", [], name="bidaw.v1.KVStore", tls=TLSFiles(a.cert, a.key))
    target = f"127.0.0.1:{server.port}"
    try:
        assert server.tls
        wait_healthy(target, 10, tls=TLSFiles(ca=a.ca))  # no client certificate needed
        with pytest.raises(TimeoutError):
            wait_healthy(target, 1.5, tls=None)  # but still no plaintext
        with pytest.raises(TimeoutError):
            wait_healthy(target, 1.5, tls=TLSFiles(ca=b.ca))  # nor trust in another CA
    finally:
        server.stop(0)


@pytest.mark.parametrize("files, server, flag, why", [
    (dict(key="A.key"), True, "--tls-cert", "give both"),
    (dict(cert="A.crt"), True, "--tls-key", "give both"),
    (dict(ca="A.ca"), True, "--tls-cert", "own certificate"),
    (dict(cert="missing.crt", key="A.key"), True, "--tls-cert", "cannot read"),
    (dict(cert="A.crt", key="A.key", ca="missing.crt"), True, "--tls-ca", "cannot read"),
    (dict(cert="junk", key="A.key"), True, "--tls-cert", "not a PEM file"),
    (dict(cert="A.crt", key="A.crt"), True, "--tls-key", "private key"),
    (dict(cert="A.crt", key="B.key"), True, "--tls-key", "does not match"),
    (dict(ca="A.crt", cert="A.crt"), False, "--tls-key", "give both"),
])
def test_bad_settings_name_the_flag(pki, tmp_path, files, server, flag, why):
    a, b = pki
    (tmp_path / "junk").write_text("hello")
    real = {"A.key": a.key, "A.crt": a.cert, "A.ca": a.ca, "B.key": b.key,
            "junk": str(tmp_path / "junk")}
    files = TLSFiles(**{k: real.get(v, str(tmp_path / v)) for k, v in files.items()})
    with pytest.raises(TLSConfigError) as err:
        load(files, server=server)
    assert flag in str(err.value) and why in str(err.value)
    for key in (a.key, b.key):  # whatever went wrong, no key material in the message
        body = open(key).read().splitlines()[1]
        assert body not in str(err.value)


def test_a_client_needs_only_the_ca(pki):
    a, _ = pki
    assert load(TLSFiles(ca=a.ca), server=False).cert is None
    assert "hidden" in repr(load(a, server=True))  # a repr never shows the key


def test_serve_refuses_bad_tls_flags_at_start(pki, tmp_path):
    a, _ = pki
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "serve", "store", "--listen",
                          "127.0.0.1:0", "--data-dir", str(tmp_path), "--tls-key", a.key],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "bidaw serve store: --tls-key is set but --tls-cert is not" in out.stderr
    env = {**os.environ, "BIDAW_SCHEDULER_TLS_CERT": a.cert, "BIDAW_SCHEDULER_TLS_KEY": a.key,
           "BIDAW_SCHEDULER_TLS_CA": str(tmp_path / "nope.crt")}
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "serve", "scheduler",
                          "--listen", "127.0.0.1:0"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode != 0 and "--tls-ca" in out.stderr and "nope.crt" in out.stderr


def test_certs_command_writes_a_private_key_and_keeps_existing_files(tmp_path, capsys):
    out = tmp_path / "certs"
    assert bidaw(["certs", "--out", str(out), "--hosts", "10.1.2.3,*.compute.bidaw.svc"]) == 0
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "*.compute.bidaw.svc" in san.get_values_for_type(x509.DNSName)
    assert "10.1.2.3" in [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    before = (out / "tls.key").read_bytes()
    assert bidaw(["certs", "--out", str(out)]) == 1  # refuses to overwrite ...
    assert (out / "tls.key").read_bytes() == before
    assert bidaw(["certs", "--out", str(out), "--force"]) == 0  # ... unless told to
    assert (out / "tls.key").read_bytes() != before


def test_deployment_with_mtls_answers_a_turn_through_the_gateway(tmp_path):
    """Every hop of `LocalDeployment(tls_dir=...)` on mTLS (gateway -> scheduler -> worker, ->
    store; the worker's Ray actor -> store), the real model answering one short turn."""
    from services.launch.launcher import LocalDeployment

    make_certs(str(tmp_path / "certs"), [])
    dep = LocalDeployment(data_dir=str(tmp_path / "dep"), tls_dir=str(tmp_path / "certs"),
                          cluster_token="e2e-token", dram_bytes="16MiB", default_max_tokens=8,
                          metrics=False)
    with dep:
        body = json.dumps({"model": "smollm2-135m", "max_tokens": 4, "messages": [
            {"role": "user", "content": "Say hi."}]}).encode()
        request = urllib.request.Request(f"{dep.gateway_url}/chat/completions", data=body,
                                         headers={"Content-Type": "application/json",
                                                  "X-Session-Id": "tls-e2e"})
        with urllib.request.urlopen(request, timeout=300) as reply:
            answer = json.load(reply)
        assert answer["choices"][0]["message"]["content"]
        assert answer["usage"]["completion_tokens"] >= 1
        with channel(dep.scheduler_target, dep.tls) as ch:
            stats = scheduler_pb2_grpc.SchedulerStub(ch).Stats(
                scheduler_pb2.SchedulerStatsRequest(), timeout=10)
        # the KV of the turn went to the store over mTLS, and the scheduler's Awareness
        # stream to the store is up over mTLS too
        assert stats.turns_finished >= 1 and stats.awareness_connected
        # the Ray engine actor (a process of its own) saved the turn's KV in the store: its
        # control calls went over mTLS
        with channel(dep.store_target, dep.tls) as ch:
            store = kv_store_pb2_grpc.KVStoreStub(ch)
            deadline = time.monotonic() + 20
            while (kept := store.Stats(kv_store_pb2.StoreStatsRequest(), timeout=5)) \
                    .dram_sessions < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
        assert kept.dram_sessions >= 1 and kept.kv_bytes_written > 0
        assert _store_stats(dep.store_target, None) == REFUSED
        with channel(dep.scheduler_target, None) as ch:
            with pytest.raises(grpc.RpcError) as err:
                scheduler_pb2_grpc.SchedulerStub(ch).Stats(scheduler_pb2.SchedulerStatsRequest(),
                                                           timeout=5)
        assert err.value.code() == REFUSED


def test_image_health_check_dials_with_the_services_tls(mtls_store, pki, monkeypatch, capsys):
    """deploy/healthcheck.py (the container HEALTHCHECK and, with components/tls, the Kubernetes
    probes) reads the service's own --tls-* / BIDAW_*_TLS_* and passes the mTLS handshake."""
    import pathlib

    a, _ = pki
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "deploy"))
    try:
        import healthcheck
    finally:
        sys.path.pop(0)
    args = ["serve", "store", "--listen", f"0.0.0.0:{mtls_store.rsplit(':', 1)[1]}"]
    assert healthcheck.main(args) == 1  # plaintext: refused
    for name, path in (("CERT", a.cert), ("KEY", a.key), ("CA", a.ca)):
        monkeypatch.setenv(f"BIDAW_STORE_TLS_{name}", path)
    assert healthcheck.main(args) == 0
    assert "serving" in capsys.readouterr().out
