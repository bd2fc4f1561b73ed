"""Flags naming a directory, a file or a listen address are checked before a service starts:
real files and directories, every service's real config class."""
from __future__ import annotations

import subprocess
import sys

import pytest

from compute_worker.config import WorkerConfig
from kv_store.config import StoreConfig
from scheduler.config import SchedulerConfig
from services.gateway.config import GatewayConfig
from services.runtime.cluster_auth import write_token_file
from services.runtime.config_checks import check_config_paths


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    return tmp_path


def refused(config) -> str:
    with pytest.raises(ValueError) as err:
        check_config_paths(config)
    return str(err.value)


def test_directories_must_be_or_become_writable_directories(paths):
    check_config_paths(StoreConfig(data_dir=str(paths / "dir")))
    check_config_paths(StoreConfig(data_dir=str(paths / "new" / "deeper")))  # can be made
    check_config_paths(SchedulerConfig(state_dir=""))  # off
    assert refused(StoreConfig(data_dir=str(paths / "file"))) == \
        f"--data-dir {paths / 'file'}: exists and is not a directory"
    assert refused(SchedulerConfig(state_dir=str(paths / "file" / "x"))) == \
        f"--state-dir {paths / 'file' / 'x'}: cannot be made: {paths / 'file'} is not a directory"


def test_files_must_be_readable_files(paths):
    check_config_paths(GatewayConfig(api_keys_file=str(paths / "file")))
    assert refused(GatewayConfig(api_keys_file=str(paths / "missing"))) == \
        f"--api-keys-file {paths / 'missing'}: no such file"
    assert refused(WorkerConfig(cluster_token_file=str(paths / "dir"))) == \
        f"--cluster-token-file {paths / 'dir'}: not a file"


@pytest.mark.parametrize("value, problem", [
    ("127.0.0.1:99999", "not HOST:PORT with a port in 0-65535"),
    ("127.0.0.1", "not HOST:PORT with a port in 0-65535"),
    ("127.0.0.1:-1", "not HOST:PORT with a port in 0-65535"),
    ("nohost.invalid:50052", "the host 'nohost.invalid' does not resolve"),
    ("999.1.1.1:9100", "the host '999.1.1.1' does not resolve"),
])
def test_listen_addresses_must_be_host_port_that_resolve(value, problem):
    assert refused(SchedulerConfig(listen=value)) == f"--listen {value}: {problem}"
    assert refused(StoreConfig(metrics_listen=value)) == f"--metrics-listen {value}: {problem}"


@pytest.mark.parametrize("value", ["0.0.0.0:50052", "127.0.0.1:0", "[::]:50052", ":8000",
                                   "localhost:9100"])
def test_usual_listen_addresses_pass(value):
    check_config_paths(GatewayConfig(listen=value, metrics_listen=value))


def test_serve_says_which_flag_in_one_line(tmp_path):
    (tmp_path / "kv").write_text("not a directory")
    token = str(tmp_path / "token")
    write_token_file(token)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "store", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "kv"), "--cluster-token-file", token],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    assert done.stderr.strip() == \
        f"bidaw serve store: --data-dir {tmp_path / 'kv'}: exists and is not a directory"


@pytest.mark.parametrize("make, error", [
    (lambda: SchedulerConfig(max_queue=-1), "--max-queue must be >= 1, got -1"),
    (lambda: SchedulerConfig(heartbeat_s=float("nan")), "--heartbeat-s must be > 0, got nan"),
    (lambda: SchedulerConfig(conversation_ttl_s=-5.0), "--conversation-ttl-s must be > 0"),
    (lambda: StoreConfig(lease_seconds=0.0), "--lease-seconds must be > 0, got 0.0"),
    (lambda: StoreConfig(ssd_read_depth=0), "--ssd-read-depth must be >= 1, got 0"),
    # the worker's: found by the engine actor after Ray's start before (a traceback), or never
    (lambda: WorkerConfig(max_batch=0), "--max-batch must be >= 1, got 0"),
    (lambda: WorkerConfig(ray_num_cpus=0), "--ray-num-cpus must be >= 1, got 0"),  # hung
    (lambda: WorkerConfig(ray_object_store_bytes=1),
     "--ray-object-store-bytes must be >= 78643200, got 1"),
    (lambda: WorkerConfig(kv_format="kv6"), "--kv-format must be one of auto, kv, tensor6"),
    (lambda: WorkerConfig(weights="q5"), "--weights must be one of auto, dense, bf16, int8"),
    (lambda: WorkerConfig(device="tpu"), "--device must be cpu, cuda or cuda:N, not 'tpu'"),
    (lambda: WorkerConfig(device="cuda:x"), "--device must be cpu, cuda or cuda:N"),
])
def test_configs_refuse_values_below_their_bounds_or_outside_their_choices(make, error):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == error or str(err.value).startswith(error)


def test_serve_refuses_a_bound_by_flag_in_one_line(tmp_path):
    token = str(tmp_path / "token")
    write_token_file(token)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "scheduler", "--listen",
         "127.0.0.1:0", "--max-queue", "0", "--cluster-token-file", token],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == "bidaw serve scheduler: --max-queue must be >= 1, got 0"


@pytest.mark.parametrize("ok", [dict(device=""), dict(device="cpu"), dict(device="cuda:1"),
                                dict(kv_format="tensor6", weights="q4", max_batch=1)])
def test_the_worker_takes_what_it_can_run(ok):
    WorkerConfig(**ok)


def serve(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    token = tmp_path / "token"
    if not token.exists():
        write_token_file(str(token))
    return subprocess.run([sys.executable, "-m", "services.cli.main", "serve", *argv,
                           "--cluster-token-file", str(token)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("service", ["scheduler", "store", "gateway"])
def test_a_port_in_use_is_one_line_naming_the_flag(tmp_path, service):
    import socket

    with socket.socket() as taken:  # a listener that is not gRPC's: no port sharing with it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        extra = ["--data-dir", str(tmp_path / "kv")] if service == "store" else []
        for flag, argv in (("--listen", ["--listen", busy]),
                           ("--metrics-listen", ["--listen", "127.0.0.1:0",
                                                 "--metrics-listen", busy])):
            done = serve(tmp_path, service, *argv, *extra)
            assert done.returncode == 1, done
            last = done.stderr.strip().splitlines()[-1]  # grpc's core logs a line of its own
            assert last.startswith(f"bidaw serve {service}: {flag} {busy}: "), done.stderr
            assert "Traceback" not in done.stderr
    assert not list((tmp_path / "kv").glob("**/*.kv"))


def test_a_second_grpc_server_on_a_port_fails_instead_of_sharing_it(tmp_path):
    # gRPC binds with SO_REUSEPORT by default: the second scheduler started and the kernel
    # split the clients' connections between the two
    from scheduler.config import SchedulerConfig as Config
    from scheduler.main import start

    first, _ = start(Config(listen="127.0.0.1:0", workers=[], store=""))
    try:
        done = serve(tmp_path, "scheduler", "--listen", f"127.0.0.1:{first.port}")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            f"bidaw serve scheduler: --listen 127.0.0.1:{first.port}: the port is in use, or "
            "the host is not one of this machine's addresses")
    finally:
        first.stop(0)


@pytest.mark.parametrize("make, error", [
    (lambda: StoreConfig(eviction="nope"), "--eviction must be one of fifo, lru"),
    (lambda: StoreConfig(eviction="belady"), "(it needs the future: `bidaw simulate` only)"),
    (lambda: SchedulerConfig(policy="nope"), "--policy must be one of bidaw, fcfs, not 'nope'"),
    # the gateway's: these ran on nonsense (every request 413, a negative Retry-After) or
    # failed naming an inner field ("max_wait_s must be > 0")
    (lambda: GatewayConfig(max_body_bytes=0), "--max-body-bytes must be >= 1, got 0"),
    (lambda: GatewayConfig(retry_after_s=-5), "--retry-after-s must be >= 0, got -5"),
    (lambda: GatewayConfig(request_timeout_s=-1.0), "--request-timeout-s must be > 0"),
    (lambda: GatewayConfig(vocab_size=-3), "--vocab-size must be >= 0, got -3"),
])
def test_configs_refuse_names_they_cannot_run(make, error):
    # each was a traceback from the store's or the scheduler's start
    with pytest.raises(ValueError) as err:
        make()
    assert error in str(err.value)


@pytest.mark.parametrize("argv, message", [
    (["--eviction", "nope"], "bidaw up: --eviction must be one of fifo, lru"),
    (["--dram-bytes", "abc"], "bidaw up: --dram-bytes abc: not a size: 'abc'"),
    (["--default-max-tokens", "x"], "bidaw up: --default-max-tokens x: not an integer: 'x'"),
    (["--default-max-tokens", "-1"], "bidaw up: --default-max-tokens must be >= 0, got -1"),
    (["--host", "nohost.invalid"],  # "no free port in 20000-32000" before
     "bidaw up: --host nohost.invalid: the host 'nohost.invalid' does not resolve"),
    (["--scheduler-port", "8000", "--port", "8000"],  # an http.client traceback before
     "bidaw up: --scheduler-port 8000: also --port's; each service needs its own port"),
    (["--metrics-port-base", "65535"], "bidaw up: --metrics-port-base (+1): port 65536 is past"),
    (["--tls-dir", "/nonexistent"],  # a TLSConfigError traceback before
     "bidaw up: --tls-dir /nonexistent: --tls-cert /nonexistent/tls.crt: cannot read it"),
])
def test_bidaw_up_says_what_would_stop_a_service_before_starting_any(tmp_path, argv, message):
    from services.cli.main import main

    with pytest.raises(SystemExit) as err:
        main(["up", "--data-dir", str(tmp_path / "d"), *argv])
    assert str(err.value.code).startswith(message), err.value.code
    assert not (tmp_path / "d" / "logs").exists()  # nothing was started
