"""Errors of the store core, each carrying the gRPC status the service answers with."""
from __future__ import annotations

import grpc


class StoreError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.NOT_FOUND, message)


def precondition(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.FAILED_PRECONDITION, message)


def exhausted(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def aborted(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.ABORTED, message)


def unavailable(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.UNAVAILABLE, message)


def out_of_range(message: str) -> StoreError:
    return StoreError(grpc.StatusCode.OUT_OF_RANGE, message)
