"""Traces, the discrete-event simulator and benchmark commands."""
