"""Eviction policies, looked up by name (see registry.py)."""
