"""The W3C trace context of the span current in this process, where Ray Serve's tracing is on: as
headers for an engine (vLLM puts its request spans in the trace they name), and as the ``trace_id`` of
every log record made inside it (Ray Serve's JSON logs carry a record's extra fields). Imports only the
standard library until tracing is on; shared by the model replicas and the ingress.
"""

from __future__ import annotations

import logging
from typing import Any


def tracing_on() -> bool:
    """Ray Serve's tracing is set up in this process (a proxy, a replica, a batch actor)."""
    from ray.serve._private.tracing_utils import is_tracing_enabled

    return is_tracing_enabled()


def trace_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span; empty when tracing is off."""
    if not tracing_on():
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    headers: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(headers)
    return headers


def sampled_trace_id(span: Any) -> str | None:
    """``span``'s trace id (32 hex digits) when it is sampled, else None: what the reply's trace and
    the logs name, and what a tracing backend finds it by."""
    found = span.get_span_context()
    return f"{found.trace_id:032x}" if found.is_valid and found.trace_flags.sampled else None


def current_trace_id() -> str | None:
    """The current span's trace id when it is sampled, else None."""
    if not tracing_on():
        return None
    from opentelemetry import trace

    return sampled_trace_id(trace.get_current_span())


class TraceIdFilter(logging.Filter):
    """Gives each record made inside a sampled trace its ``trace_id``."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = current_trace_id()
        if found is not None:
            record.trace_id = found
        return True


def log_trace_ids(logger_name: str = "ray.serve") -> None:
    """Every record of ``logger_name`` (Serve's replica logs and access log, and MAI's) names its trace;
    once per process."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(found, TraceIdFilter) for found in logger.filters):
        logger.addFilter(TraceIdFilter())
