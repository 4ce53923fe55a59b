"""The OTLP span exporter Ray Serve's tracing loads in every process (``span_processors``), configured
by the standard ``OTEL_*`` variables, and their check at start (``exporter_settings``).

Read: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` added
for HTTP, as the specification says), ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the default, or ``grpc``), the headers and timeout
variables (read by the OpenTelemetry exporters themselves; the timeouts, in seconds, checked here, and
``EXPORT_TIMEOUT_S`` when neither is set), ``OTEL_SERVICE_NAME`` (``mai-serve`` when unset) and
``OTEL_RESOURCE_ATTRIBUTES``. Spans leave in batches from a bounded queue on the exporter's
own thread: a collector that is down or slow never delays a request; what could not be sent is counted
(``mai_trace_spans_dropped_total``) and logged once.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

logger = logging.getLogger("ray.serve")

PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_ENDPOINTS = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}
SERVICE_NAME = "mai-serve"
# The exporter's queue and batches (the SDK's defaults are 2048 and 512): a bound on memory when the
# collector is away, and a request never waits on it.
MAX_QUEUE_SIZE = 4096
MAX_EXPORT_BATCH_SIZE = 512
# Each export's timeout when neither timeout variable is set (the OpenTelemetry exporters' own default
# is 10 s); either variable, in seconds as the Python exporters read it, replaces it.
EXPORT_TIMEOUT_S = 5.0
TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
# The counter of spans not exported, tagged ``reason`` (Prometheus: ``ray_mai_trace_spans_dropped_total``);
# listed with the project's other metrics in serve_app/edge/observers.py's ``PROMETHEUS_METRICS``.
DROPPED_METRIC = "mai_trace_spans_dropped"
DROPPED_DESCRIPTION = "Spans not exported: the collector unreachable or slow, or the queue full."


class TelemetryConfigError(ValueError):
    """A tracing variable the exporter cannot honour, named with its value."""


@dataclass(frozen=True)
class ExporterSettings:
    protocol: str
    endpoint: str  # where spans are sent: a URL ending /v1/traces (HTTP), or the gRPC target URL
    # Each export's timeout in seconds from ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`` (else
    # ``OTEL_EXPORTER_OTLP_TIMEOUT``), which the exporters read themselves; None: neither is set, and
    # the exporter is given ``EXPORT_TIMEOUT_S``.
    timeout_s: float | None = None


def exporter_settings(environ: Mapping[str, str] | None = None) -> ExporterSettings:
    """The exporter's protocol, endpoint and timeout from the ``OTEL_*`` variables; a protocol it does
    not speak, an endpoint that is no http(s) URL, a timeout that is no positive number of seconds, or a
    sampler variable Ray Serve would not read is refused, naming the variable."""
    env = os.environ if environ is None else environ
    name, protocol = _first(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
    protocol = (protocol or "http/protobuf").strip()
    if protocol not in PROTOCOLS:
        raise TelemetryConfigError(f"{name}={protocol!r}: the OTLP exporter speaks {' or '.join(PROTOCOLS)}")
    for sampler in ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):
        if env.get(sampler):
            raise TelemetryConfigError(
                f"{sampler} is set, but Ray Serve samples its traces itself: set "
                "RAY_SERVE_TRACING_SAMPLING_RATIO (a ratio, honoured where a trace starts) instead"
            )
    specific, endpoint = _first(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    general, base = _first(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint:
        named, url = specific, endpoint.strip()
    else:
        named, url = general, (base or DEFAULT_ENDPOINTS[protocol]).strip()
        if protocol == "http/protobuf":
            url = url.rstrip("/") + "/v1/traces"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TelemetryConfigError(f"{named or 'the OTLP endpoint'}={url!r}: not an http(s) URL with a host")
    try:
        parts.port  # noqa: B018 - a port that is no number raises here
    except ValueError:
        raise TelemetryConfigError(f"{named}={url!r}: its port is not a number") from None
    return ExporterSettings(protocol, url, _timeout(env))


def _timeout(env: Mapping[str, str]) -> float | None:
    """The export timeout the variables give, the traces one first (as the exporters read them); each
    that is present must be a positive number of seconds, an empty one included (the gRPC exporter
    fails on it)."""
    found: float | None = None
    for name in TIMEOUT_VARIABLES:
        if name not in env:
            continue
        text = env[name]
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise TelemetryConfigError(f"{name}={text!r}: an export timeout, a positive number of seconds")
        if found is None:
            found = value
    return found


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str | None]:
    for name in names:
        if env.get(name):
            return name, env[name]
    return names[0], None


class DropCount:
    """Spans that did not reach the collector, in this process: counted as a Prometheus counter and
    logged once per process (then every 10,000th)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0
        self._counter = None

    def add(self, spans: int, reason: str) -> None:
        if spans <= 0:
            return
        with self._lock:
            self.total += spans
            first, total = self.total == spans, self.total
        if first or total // 10_000 != (total - spans) // 10_000:
            logger.warning(
                "MAI traces: %d span(s) not exported (%s); %d so far in this process. Requests are "
                "unaffected.",
                spans,
                reason,
                total,
            )
        self._metric().inc(spans, tags={"reason": reason})

    def _metric(self):
        if self._counter is None:
            from ray.util.metrics import Counter

            self._counter = Counter(DROPPED_METRIC, description=DROPPED_DESCRIPTION, tag_keys=("reason",))
        return self._counter


DROPS = DropCount()


def span_processors() -> list:
    """Ray Serve's exporter hook (``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH``): one batch processor over
    the OTLP exporter the ``OTEL_*`` variables describe. Ray calls it before it makes the process's
    tracer provider, so the service name set here is the provider's."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    settings = exporter_settings()
    os.environ.setdefault("OTEL_SERVICE_NAME", SERVICE_NAME)
    # The exporters log every retry and failed batch (the engine's too, in a model replica): a
    # collector away for an hour would fill the logs. ``DROPS`` counts them and says so once.
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
    logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)
    exporter = _counting(_exporter(settings))
    processor = _queue_bound()(
        exporter,
        max_queue_size=MAX_QUEUE_SIZE,
        max_export_batch_size=MAX_EXPORT_BATCH_SIZE,
        export_timeout_millis=int((settings.timeout_s or EXPORT_TIMEOUT_S) * 1000),
    )
    assert isinstance(processor, BatchSpanProcessor)
    return [processor]


def _exporter(settings: ExporterSettings):
    # A timeout variable is read by the exporter itself (the traces one first) when it is given None;
    # only without one is the timeout given here, since an argument outranks the environment.
    timeout = EXPORT_TIMEOUT_S if settings.timeout_s is None else None
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        parts = urlsplit(settings.endpoint)
        return Grpc(endpoint=settings.endpoint, insecure=parts.scheme == "http", timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=settings.endpoint, timeout=timeout)


def _counting(exporter):
    """``exporter``, counting the spans of every batch it could not send."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    export = exporter.export

    def counted(spans: Sequence) -> SpanExportResult:
        try:
            result = export(spans)
        except Exception:  # an exporter that raises: the batch is lost, never the request
            DROPS.add(len(spans), "export_failed")
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            DROPS.add(len(spans), "export_failed")
        return result

    exporter.export = counted
    return exporter


def _queue_bound():
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class QueueBound(BatchSpanProcessor):
        """The SDK's batch processor, counting the spans its full queue turns away (a lower bound: two
        threads ending spans at once may both pass the check, and the SDK then drops its oldest)."""

        def on_end(self, span) -> None:
            if not span.context.trace_flags.sampled:
                return
            queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
            if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
                DROPS.add(1, "queue_full")
                return
            super().on_end(span)

    return QueueBound


def trace_this_process(component: str, component_id: str) -> bool:
    """Ray Serve's tracing in a process Serve did not start (a ``mai-batch`` actor), set up as Serve
    sets up a replica's: from ``RAY_SERVE_TRACING_*``, with the same exporter and sampling ratio.
    Whether it is on."""
    from ray.serve._private.tracing_utils import is_tracing_enabled, setup_tracing

    if is_tracing_enabled():
        return True
    if not os.environ.get("RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"):
        return False
    return setup_tracing(component_name=component, component_id=component_id)
