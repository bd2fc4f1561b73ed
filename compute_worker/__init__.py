"""Bidaw compute worker: model code, loaders and tokenizer for prefill/decode and tensor-6 restore."""
