"""`bidaw bench gateway --backend echo` runs end to end: a gateway process in front of an echo
scheduler that stands in for the whole serving path (its /health must say ready)."""
import json
import subprocess
import sys


def test_the_echo_gateway_bench_prints_its_figures():
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "bench", "gateway",
                          "--backend", "echo", "--turns", "4", "--json"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["backend"] == "echo" and figures["turns"] == 4
    assert figures["direct_grpc_ms_p50"] > 0 and figures["gateway_http_ms_p50"] > 0
