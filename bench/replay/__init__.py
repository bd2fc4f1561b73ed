"""Live replay of a multi-turn trace against a running deployment.

Pure parts: `plan` (trace -> per-user scripts), `window`, `tokens`, `sizing`, `systems`, `report`,
`table`. I/O parts: `client` (the open-loop replayer), `sampler` (Scheduler.Stats), `records`
(JSONL), `plots` (PNG), `live` (one deployment per system under test).
"""
