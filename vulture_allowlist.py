"""Names `vulture --min-confidence 60` reports that are used, in ways it cannot see.

Run: `python -m vulture services kv_store scheduler compute_worker bench deploy vulture_allowlist.py
--min-confidence 60 --exclude '*/gen/*'` (nothing beyond this list should show).
"""
# ruff: noqa
_ = object

# gRPC calls these by name: interceptor hooks, an OTLP collector servicer method, health List.
_.intercept_service
_.intercept_unary_unary
_.intercept_unary_stream
_.intercept_stream_unary
_.intercept_stream_stream
_.Export
_.List  # the health service's List (services/runtime/health.py)
# http.server and socketserver read these (services/runtime/metrics.py's /metrics server).
_.log_message
_.daemon_threads

# The store's counters, reported whole (`dataclasses.asdict` into StoreStats and /metrics).
_.dram_hits
_.ssd_hits
_.ssd_bytes_read
_.ssd_bytes_written
_.kv_bytes_written
_.dram_evictions
_.ssd_evictions
_.answers_observed
_.arrivals_observed
_.corrupt_records
_.prepared_handed_over  # StoreStats, through vars(counters)
_.ssd_write_failures
_.speculative_bytes_read  # the Prefetcher's counters, the same way
_.prefetches_refused
_.shm_reads

# Per-turn record fields, written whole to JSONL for offline analysis (`bidaw bench
# cache-replay`, plots, docs/replay.md).
_.first_s
_.prev_end_s
_.kv_bytes_at_arrival
_.server_ttft_s
_.server_latency_s

# Attributes set on library objects (the `tokenizers` pipeline; aiohttp's server class).
_.pre_tokenizer
_.decoder
_.__class__

# Read by tests and operators as observable state, or documented API (docs/policies.md).
_.resolved
_.hrrn_ratio
_.metrics_port
_.simulate_policies

# The SSD read gate's counters (kv_store/tiers/read_gate.py): how often a speculative read
# yielded to demand, or was taken over by one; the tests read them.
_.yields
_.adoptions

# Whether the promotion planner keeps anything of a session (kv_store/eviction/prefetch_planner.py):
# the test that a session gone from every tier leaves nothing behind reads it.
_.remembers
