"""`bidaw` subcommands for traces, simulation and benchmarks."""
