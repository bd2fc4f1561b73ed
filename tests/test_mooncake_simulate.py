"""`bidaw simulate --cache-only --format mooncake` on a file in the exact format of Mooncake's
FAST'25 `conversation_trace.jsonl`: the conversations are recovered and every policy is reported
on the same returning turns."""
from __future__ import annotations

import json

from services.cli.main import main
from tests.test_mooncake_conversations import _synthetic_rows, _write

POLICIES = "fifo,lru,queue-aware,bidaw,bidaw-size,belady"


def test_every_policy_on_a_mooncake_conversation_trace(tmp_path, capsys):
    rows, conv_of = _synthetic_rows(400, seed=3)
    path = _write(tmp_path, rows)
    assert main(["trace", "stats", path, "--format", "mooncake", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["users"] == 400
    assert main(["simulate", "--cache-only", "--trace", path, "--format", "mooncake",
                 "--policies", POLICIES, "--dram-gib", "30", "--no-end-oracle", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["turns"] == len(rows)
    policies = out["policies"]
    assert list(policies) == POLICIES.split(",")
    for name, m in policies.items():
        # every request but each conversation's first is a return, hit or miss
        assert (m["hits"] + m["misses"], m["firsts"]) == (len(rows) - 400, 400), name
        assert 0.0 < m["hit_rate"] < 1.0, name
    assert policies["belady"]["hit_rate"] >= max(policies[n]["hit_rate"] for n in ("fifo", "lru"))
    # with SSD time the promoting policy runs too
    assert main(["simulate", "--cache-only", "--trace", path, "--format", "mooncake",
                 "--policies", "lru,bidaw-prefetch", "--dram-gib", "30", "--ssd-gbps", "1.5",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"lru", "bidaw-prefetch"}
    assert out["policies"]["bidaw-prefetch"]["ssd_read_bytes"] > 0
