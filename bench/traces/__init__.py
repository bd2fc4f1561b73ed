"""Multi-turn conversation traces: one `Turn` per request, loaders per format, a generator.

`load_trace(path, fmt)` reads any supported format; `synthesize(...)` makes a seeded trace with
the paper's statistics when the real files are absent.
"""
from bench.traces.turn import Turn
from bench.traces.loaders import FORMATS, load_trace
from bench.traces.synthetic import SynthConfig, synthesize

__all__ = ["Turn", "FORMATS", "load_trace", "SynthConfig", "synthesize"]
