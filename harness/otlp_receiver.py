"""An OTLP/HTTP trace receiver for tests: what an exporter really sent, decoded.

``OtlpReceiver`` listens on 127.0.0.1 (an ephemeral port unless one is given) for ``POST /v1/traces``
with an ``application/x-protobuf`` body (gzip allowed), decodes it as an ``ExportTraceServiceRequest``
and keeps each span as a ``ReceivedSpan``. ``status`` other than 200 makes it refuse every export with
that status, ``delay_s`` makes it slow. From another process (Ray's replicas exporting to it):
``python -m harness.otlp_receiver --port N --out FILE.jsonl`` writes each span as a JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

PATH = "/v1/traces"


def _hex(value: object) -> str:
    """A bytes attribute in a JSON line, as hex."""
    return value.hex() if isinstance(value, bytes) else repr(value)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it; ``kind`` and ``status`` named as OTLP names them, without
    their prefix (``CLIENT``, ``ERROR``, ``UNSET``)."""

    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # 16 hex digits, or "" for a trace's root
    kind: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace_id, span_id) of each linked span
    status: str
    status_message: str
    start_ns: int
    end_ns: int
    resource: dict[str, Any]  # the resource's attributes, e.g. service.name


def value_of(value: AnyValue) -> Any:
    """An OTLP attribute value as a Python value (an array a list, a key-value list a dict)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return None if which is None else getattr(value, which)


def attributes_of(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """OTLP key-values as a dict."""
    return {pair.key: value_of(pair.value) for pair in pairs}


def spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Every span of an export request, with its resource's attributes."""
    found: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        attributes=attributes_of(span.attributes),
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        status=Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
                        status_message=span.status.message,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        resource=resource,
                    )
                )
    return found


class OtlpReceiver:
    """The receiver, listening while its ``with`` block runs."""

    def __init__(self, port: int = 0, out: TextIO | None = None) -> None:
        self.status = 200  # anything else: every export refused with it
        self.delay_s = 0.0  # each export answered this late (released at once when the receiver stops)
        self.requests = 0  # export requests received, refused ones included
        self._out, self._lock, self._release = out, threading.Lock(), threading.Event()
        self._spans: list[ReceivedSpan] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"

    def __enter__(self) -> OtlpReceiver:
        serving = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        serving.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[ReceivedSpan]:
        """The spans received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 5.0
    ) -> list[ReceivedSpan]:
        """The spans once ``predicate`` holds of them; AssertionError naming what arrived if it does not
        within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = [span.name for span in spans]
                raise AssertionError(f"after {timeout_s}s, {self.requests} export(s), spans: {names}")
            time.sleep(0.02)

    def _received(self, body: bytes) -> None:
        spans = spans_of(ExportTraceServiceRequest.FromString(body))
        with self._lock:
            self._spans.extend(spans)
            if self._out is not None:
                for span in spans:
                    self._out.write(json.dumps(asdict(span), default=_hex) + "\n")
                self._out.flush()


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with receiver._lock:
                receiver.requests += 1
            if receiver.delay_s:
                receiver._release.wait(receiver.delay_s)
            if self.path != PATH:
                return self._reply(404)
            if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/x-protobuf":
                return self._reply(415)
            if receiver.status != 200:
                return self._reply(receiver.status)
            try:
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                receiver._received(body)
            except (DecodeError, OSError, EOFError):
                return self._reply(400)
            self._reply(200, ExportTraceServiceResponse().SerializeToString())

        def _reply(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a test's output is its own."""

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Receive until interrupted, each span a JSON line of ``--out``; the endpoint printed first."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with open(args.out, "a") as out, OtlpReceiver(args.port, out) as receiver:
        print(receiver.endpoint, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
