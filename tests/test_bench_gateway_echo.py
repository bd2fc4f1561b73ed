"""`bidaw bench gateway --backend echo` runs end to end: a gateway process in front of an echo
scheduler that stands in for the whole serving path (its /health must say ready)."""
import json
import os
import subprocess
import sys


def test_the_echo_gateway_bench_prints_its_figures(tmp_path):
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "bench", "gateway",
                          "--backend", "echo", "--turns", "4", "--json"],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["backend"] == "echo" and figures["turns"] == 4
    assert figures["direct_grpc_ms_p50"] > 0 and figures["gateway_http_ms_p50"] > 0
    # the cluster token it wrote for its gateway goes with it: no secret left behind
    assert not list(tmp_path.glob("bidaw-token-*"))
