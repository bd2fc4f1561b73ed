"""The OpenAI-compatible HTTP front door: /v1/chat/completions, /v1/completions, /v1/models,
/health and /metrics, in front of the scheduler's SubmitTurn."""
