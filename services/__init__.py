"""Shared runtime of the Bidaw services: config, gRPC bootstrap, generated stubs, tracing, CLI."""
