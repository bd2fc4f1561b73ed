"""The glibc malloc settings services apply at start (services/runtime/malloc.py)."""
from __future__ import annotations

import ctypes

from services.runtime import malloc


def test_tune_applies_both_settings_on_glibc(monkeypatch):
    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeLibc())
    assert malloc.tune()
    assert calls == [(malloc.M_MMAP_THRESHOLD, 1 << 20), (malloc.M_ARENA_MAX, 2)]


def test_the_environment_wins_and_other_libcs_are_left_alone(monkeypatch):
    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append(param)
            return 1

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeLibc())
    assert malloc.tune() and calls == [malloc.M_MMAP_THRESHOLD]

    def no_glibc(name):
        raise OSError("not found")

    monkeypatch.setattr(ctypes, "CDLL", no_glibc)
    assert malloc.tune() is False
