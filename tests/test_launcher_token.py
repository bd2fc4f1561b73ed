"""Two deployments started by one process share its cluster token, and stopping one leaves the
other's clients here authenticated (the first one stopped used to reset the token to none)."""
from __future__ import annotations

from services.launch.launcher import LocalDeployment
from services.runtime.cluster_auth import cluster_token, configure_token


def test_stopping_one_deployment_keeps_the_token_another_still_runs_on(tmp_path):
    before = cluster_token()
    configure_token("")  # a process that has made no token yet
    try:
        first = LocalDeployment(data_dir=str(tmp_path / "a"))
        first._write_token()  # what start() does before launching anything
        token = cluster_token()
        assert token and first.cluster_token == token
        second = LocalDeployment(data_dir=str(tmp_path / "b"))
        second._write_token()
        assert second.cluster_token == token
        first.stop()
        assert cluster_token() == token  # the second one's clients still send it
        second.stop()
        assert cluster_token() == token
    finally:
        configure_token(before)


def test_a_deployment_with_its_own_token_gives_the_process_its_token_back(tmp_path):
    before = cluster_token()
    configure_token("process-token")
    try:
        dep = LocalDeployment(data_dir=str(tmp_path / "c"), cluster_token="its-own")
        dep._write_token()
        assert cluster_token() == "its-own"
        dep.stop()
        assert cluster_token() == "process-token"
    finally:
        configure_token(before)


def test_free_ports_are_never_handed_out_twice():
    """A deployment picks its ten ports before its services bind them: two equal draws failed a
    start (`--metrics-listen ...: Address already in use`, seen once in CI)."""
    from services.launch.service_process import free_port

    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports) and all(20000 <= p < 32000 for p in ports)
