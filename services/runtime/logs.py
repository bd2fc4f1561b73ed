"""Structured logs: one JSON object per line with the service, the trace and span ids.

BIDAW_LOG_FORMAT=text gives the human form instead (the trace id is appended when there is one);
BIDAW_LOG_LEVEL sets the level. The trace id is the one Jaeger shows, so a slow turn found in a
trace leads straight to its log lines and back.
"""
from __future__ import annotations

import json
import logging
import os
import time

from opentelemetry import trace

from services.runtime.log_repeats import RepeatFilter

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message", "asctime", "service", "trace_id", "span_id"}


class TraceContextFilter(logging.Filter):
    """Adds service, trace_id and span_id (empty outside a span) to every record."""

    def __init__(self, service: str):
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        record.service = self.service
        record.trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else ""
        record.span_id = format(ctx.span_id, "016x") if ctx.is_valid else ""
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "service": getattr(record, "service", ""),
               "logger": record.name, "message": record.getMessage()}
        if getattr(record, "trace_id", ""):
            out["trace_id"] = record.trace_id
            out["span_id"] = record.span_id
        # `log.info("...", extra={"session": sid})` lands as a field of its own.
        out.update({k: v for k, v in vars(record).items()
                    if k not in _RESERVED and not k.startswith("_")})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self, service: str):
        super().__init__(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace_id = getattr(record, "trace_id", "")
        return f"{text} trace_id={trace_id}" if trace_id else text


def setup_logging(service: str) -> None:
    """Configure the root logger for a service process (replaces earlier handlers)."""
    handler = logging.StreamHandler()
    handler.addFilter(TraceContextFilter(service))
    handler.addFilter(RepeatFilter("opentelemetry"))  # a collector down: not a line a batch
    text = os.environ.get("BIDAW_LOG_FORMAT", "json").lower() == "text"
    handler.setFormatter(TextFormatter(service) if text else JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(os.environ.get("BIDAW_LOG_LEVEL", "INFO").upper())
