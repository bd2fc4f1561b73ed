"""Chaos: faults injected into live replays (one module per fault in `faults/`), judged against a
recompute reference and acknowledged-KV probes; and fuzzing of the services' inputs."""
