"""No open internal doors (issue 16 §1), against the embedded deployment's real processes:
every internal RPC needs the cluster token, static members stay, files are private."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import grpc

from bench.chaos.attacker import SERVICES, attack, refused, snapshot
from services.client.chat_client import ChatClient
from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel

WORKER = scheduler_pb2.MEMBER_KIND_WORKER
STORE = scheduler_pb2.MEMBER_KIND_STORE


def _targets(dep) -> dict[str, str]:
    return {"scheduler": dep.scheduler_target, "store": dep.store_target,
            "worker": dep.worker_target}


def test_an_outsider_is_refused_on_every_method_and_changes_nothing(deployment):
    client = ChatClient(deployment.scheduler_target)
    victim = "auth-victim"
    first = client.turn(victim, [{"role": "user", "content": "Name a colour."}], max_tokens=8)
    before = snapshot(deployment.scheduler_target, deployment.store_target, victim)
    assert before["kv_tokens"] and before["workers"] == 1 and before["stores"] == 1

    results = attack(_targets(deployment), victim, deployment.worker_target)

    methods = sum(len(s.methods) for s in SERVICES.values())
    assert methods >= 18 and len(results) == 2 * methods  # each without and with a guess
    assert results["Scheduler/PrepareSession (no token)"] == "UNAUTHENTICATED"
    assert refused(results) == []
    time.sleep(7)  # past the membership TTL (3 heartbeats of 2 s): a fake member would show
    assert snapshot(deployment.scheduler_target, deployment.store_target, victim) == before
    # the deployment still serves the victim, from its untouched KV
    again = client.turn(victim, [{"role": "user", "content": "Name a colour."},
                                 {"role": "assistant", "content": first.text},
                                 {"role": "user", "content": "Another one."}], max_tokens=8)
    assert again.summary.cached_tokens >= len(before["kv_tokens"]) - 1
    client.close()


def test_the_health_service_stays_open_for_probes(deployment):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    for target in _targets(deployment).values():
        with channel(target, token=None) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                         timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            # List (what grpc-health-probe and meshes may call): every status, not UNIMPLEMENTED
            listed = health_pb2_grpc.HealthStub(ch).List(health_pb2.HealthListRequest(),
                                                         timeout=10)
            assert listed.statuses[""].status == health_pb2.HealthCheckResponse.SERVING
            assert len(listed.statuses) == 2  # "" and the service's own name


def test_static_members_cannot_be_removed_or_replaced(deployment):
    """Even with the token (a compromised member): the members given by flags stay."""
    stub = scheduler_pb2_grpc.SchedulerStub(channel(deployment.scheduler_target))

    def stats():
        return stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=10)

    for kind, address in ((WORKER, deployment.worker_target), (STORE, deployment.store_target)):
        try:
            stub.Deregister(scheduler_pb2.Registration(kind=kind, address=address), timeout=10)
            raise AssertionError("a static member was deregistered")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "configured at start" in exc.details()
        # one Register and no heartbeats: before, it expired the static member 6 s later
        stub.Register(scheduler_pb2.Registration(kind=kind, address=address), timeout=10)
    time.sleep(7)
    assert (stats().workers, stats().stores) == (1, 1)
    answer = ChatClient(deployment.scheduler_target).turn(
        "auth-static", [{"role": "user", "content": "Hi"}], max_tokens=4)
    assert answer.token_ids


def _modes(root: str) -> dict[str, int]:
    out = {root: stat.S_IMODE(os.stat(root).st_mode)}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(here, name)
            out[path] = stat.S_IMODE(os.stat(path).st_mode)
    return out


def test_kv_files_and_shared_memory_are_private(deployment):
    from services.runtime.gen import kv_store_pb2, kv_store_pb2_grpc

    ChatClient(deployment.scheduler_target).turn(  # past the 4 MiB DRAM tier: onto SSD
        "auth-files", [{"role": "user", "content": "Tell me about the sea. " * 20}],
        max_tokens=4)
    kv = os.path.join(deployment.data_dir, "kv")
    shm = kv_store_pb2_grpc.KVStoreStub(channel(deployment.store_target)).ShmInfo(
        kv_store_pb2.ShmInfoRequest(), timeout=10).dir
    for root in (kv, shm):
        modes = _modes(root)
        assert any(os.path.isfile(p) for p in modes), root
        loose = {p: oct(m) for p, m in modes.items()
                 if m != (0o700 if os.path.isdir(p) else 0o600)}
        assert not loose, loose


def test_the_run_directory_and_token_file_are_private(deployment):
    run = deployment.run_dir
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(deployment.token_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(deployment.data_dir).st_mode) == 0o700
    token = open(deployment.token_file).read().strip()
    assert len(token) >= 40 and token == deployment.cluster_token
    logs = os.path.join(deployment.data_dir, "logs")
    for name in os.listdir(logs):
        assert stat.S_IMODE(os.stat(os.path.join(logs, name)).st_mode) == 0o600, name
        assert token not in open(os.path.join(logs, name), errors="replace").read()


def test_a_service_without_a_token_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if "CLUSTER_TOKEN" not in k}
    for service in ("scheduler", "store", "gateway"):
        out = subprocess.run([sys.executable, "-m", "services.cli.main", "serve", service,
                              "--listen", "127.0.0.1:0"], capture_output=True, text=True,
                             timeout=120, env=env, cwd=tmp_path)
        assert out.returncode != 0, service
        assert f"bidaw serve {service}: no cluster token" in out.stderr
        assert "--cluster-token-file" in out.stderr and "--insecure-no-auth" in out.stderr


def test_token_command_writes_a_private_file_and_keeps_an_existing_one(tmp_path, capsys):
    from services.cli.main import main as bidaw

    out = tmp_path / "token"
    assert bidaw(["token", "--out", str(out)]) == 0
    first = out.read_text().strip()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600 and len(first) >= 40
    assert first not in capsys.readouterr().out  # the token is never printed
    try:
        bidaw(["token", "--out", str(out)])
        raise AssertionError("an existing token file was overwritten")
    except SystemExit as exc:
        assert "--force" in str(exc)
    assert out.read_text().strip() == first
    os.chmod(out, 0o644)
    assert bidaw(["token", "--out", str(out), "--force"]) == 0
    assert out.read_text().strip() != first and stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_membership_keeps_static_members_out_of_expiry():
    from scheduler.membership import Membership

    m = Membership(heartbeat_s=1.0, static=[(WORKER, "w:1"), (STORE, "s:1")])
    assert m.beat(WORKER, "w:1", 0.0) is False  # a static member is never "new"
    assert m.beat(WORKER, "w:2", 0.0) is True
    assert m.expired(10.0) == [(WORKER, "w:2")]  # only the registered one expires
    assert m.leave(STORE, "s:1") is False and m.is_static(STORE, "s:1")
    assert not m.is_static(STORE, "w:1")  # kind matters
