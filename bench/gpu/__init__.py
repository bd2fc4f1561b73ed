"""`bidaw bench gpu`: the CUDA check, in one run that prints one JSON object (docs/gpu.md)."""
