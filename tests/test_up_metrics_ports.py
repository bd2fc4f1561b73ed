"""`bidaw up --metrics-port-base N` puts the store's, worker's and scheduler's /metrics on N,
N+1, N+2 (free ports without it), and passes them to the services it starts."""
from __future__ import annotations

from services.cli.main import build_parser
from services.launch.launcher import LocalDeployment, free_port


def test_metrics_port_base_sets_the_three_ports(tmp_path):
    base = free_port()
    args = build_parser().parse_args(["up", "--metrics-port-base", str(base)])
    assert args.metrics_port_base == base
    dep = LocalDeployment(data_dir=str(tmp_path), metrics_port_base=args.metrics_port_base)
    assert dep.metrics_ports == {"store": base, "worker": base + 1, "scheduler": base + 2}
    assert dep._metrics_args("scheduler") == ["--metrics-listen", f"127.0.0.1:{base + 2}"]
    assert dep.metrics_urls["worker"] == f"http://127.0.0.1:{base + 1}/metrics"


def test_without_it_the_ports_are_free_ones(tmp_path):
    assert build_parser().parse_args(["up"]).metrics_port_base == 0
    ports = LocalDeployment(data_dir=str(tmp_path)).metrics_ports
    assert len(set(ports.values())) == 3 and all(ports.values())
