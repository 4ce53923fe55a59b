"""Serve's proxy keeps a client's W3C trace context only when trusted.

Ray Serve's proxy starts each request's trace from the request's ``traceparent`` header when it has
one: a client could join its requests to a trace of its choosing and have every one sampled. Loaded
by the proxy (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=serve_app.telemetry.proxy:middlewares``), this
ASGI middleware runs before it: unless ``MAI_TRUST_TRACEPARENT`` is true, ``traceparent`` and
``tracestate`` are removed, so the proxy starts a new trace, sampled at Serve's ratio; when trusted,
only a well-formed ``traceparent`` (version 00, non-zero ids, one header) and a ``tracestate`` of at
most 512 bytes pass. Malformed or hostile values are dropped, never refused: tracing never fails a
request. Parsed by length and character, in linear time.
"""

from __future__ import annotations

from typing import Any

from .settings import trusts_traceparent

TRACE_HEADERS = (b"traceparent", b"tracestate")
MAX_TRACESTATE_BYTES = 512
_HEX = frozenset(b"0123456789abcdef")


def valid_traceparent(value: bytes) -> bool:
    """``00-<32 hex>-<16 hex>-<2 hex>``, lowercase, neither id all zeros (W3C Trace Context, level 1)."""
    if len(value) != 55 or value[2:3] != b"-" or value[35:36] != b"-" or value[52:53] != b"-":
        return False
    version, trace_id, parent_id, flags = value[:2], value[3:35], value[36:52], value[53:]
    if version != b"00" or not all(byte in _HEX for byte in trace_id + parent_id + flags):
        return False
    return trace_id != b"0" * 32 and parent_id != b"0" * 16


def kept_headers(headers: list[tuple[bytes, bytes]], trusted: bool) -> list[tuple[bytes, bytes]]:
    """``headers`` with the trace context removed, or, when ``trusted``, only a valid one kept."""
    others = [(name, value) for name, value in headers if name.lower() not in TRACE_HEADERS]
    if not trusted:
        return others
    parents = [value for name, value in headers if name.lower() == b"traceparent"]
    if len(parents) != 1 or not valid_traceparent(parents[0].strip()):
        return others
    states = [value for name, value in headers if name.lower() == b"tracestate"]
    kept = [(b"traceparent", parents[0].strip())]
    if len(states) == 1 and len(states[0]) <= MAX_TRACESTATE_BYTES and states[0].isascii():
        kept.append((b"tracestate", states[0]))
    return others + kept


class TraceContextGuard:
    """The ASGI middleware: each HTTP or WebSocket request's headers through ``kept_headers``."""

    def __init__(self, app: Any, trusted: bool = False):
        self.app, self.trusted = app, trusted

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            headers = list(scope.get("headers") or ())
            if any(name.lower() in TRACE_HEADERS for name, _ in headers):
                scope = {**scope, "headers": kept_headers(headers, self.trusted)}
        await self.app(scope, receive, send)


def middlewares() -> list:
    """Ray Serve's proxy callback: the guard, trusting as ``MAI_TRUST_TRACEPARENT`` says."""
    from starlette.middleware import Middleware

    return [Middleware(TraceContextGuard, trusted=trusts_traceparent())]
