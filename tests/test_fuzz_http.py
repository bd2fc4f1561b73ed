"""Fuzzing the HTTP gateway of the real deployment (hypothesis): malformed JSON, wrong types,
out-of-range numbers, adversarial session headers, random methods and paths, lying
Content-Length, a 9 MB body. Every request gets an HTTP answer, never a 5xx except 503
shedding, and the gateway stays healthy."""
from __future__ import annotations

from bench.chaos.fuzz_http import fuzz_http


def test_gateway_endpoints_survive_adversarial_http(deployment):
    tally = fuzz_http(deployment.host, deployment.gateway_port, examples=80)
    assert tally.inputs > 180
    assert not tally.crashes, tally.crashes[:10]
    assert tally.statuses.get(200, 0) >= 5  # well-formed ones reached the model and back
    assert tally.statuses.get(400, 0) >= 50  # malformed ones were refused, clearly
    assert all(p.poll() is None for _, p in deployment.procs)
