"""The OTLP exporter Ray Serve's tracing loads: its settings from the ``OTEL_*`` variables, and the
spans it sends to a real OTLP/HTTP receiver, or counts as dropped without delaying anyone."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from harness.otlp_receiver import OtlpReceiver, ReceivedSpan
from serve_app.telemetry import exporter
from serve_app.telemetry.exporter import ExporterSettings, TelemetryConfigError, exporter_settings

OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
)


# --- exporter_settings -------------------------------------------------------------------------------


def test_http_protobuf_to_the_local_collector_by_default() -> None:
    assert exporter_settings({}) == ExporterSettings("http/protobuf", "http://localhost:4318/v1/traces")


def test_grpc_is_spoken_to_the_grpc_port_without_a_path() -> None:
    settings = exporter_settings({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert settings == ExporterSettings("grpc", "http://localhost:4317")


def test_the_traces_protocol_outranks_the_general_one() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    assert exporter_settings(env).protocol == "grpc"


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"])
def test_a_protocol_it_does_not_speak_is_refused_naming_the_variable(variable: str) -> None:
    with pytest.raises(TelemetryConfigError, match=f"^{variable}='http/json'"):
        exporter_settings({variable: "http/json"})


def test_the_general_endpoint_gets_the_traces_path_for_http() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318/"}
    assert exporter_settings(env).endpoint == "https://collector.example:4318/v1/traces"


def test_the_general_endpoint_is_the_grpc_target_as_given() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert exporter_settings(env).endpoint == "http://collector:4317"


def test_the_traces_endpoint_is_used_as_it_is_and_outranks_the_general_one() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:9999/custom/path",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318",
    }
    assert exporter_settings(env).endpoint == "http://collector:9999/custom/path"


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"])
@pytest.mark.parametrize("url", ["collector:4318", "ftp://collector:4318", "http://:4318/v1/traces"])
def test_an_endpoint_that_is_no_http_url_with_a_host_is_refused_naming_the_variable(
    variable: str, url: str
) -> None:
    with pytest.raises(TelemetryConfigError, match=f"^{variable}="):
        exporter_settings({variable: url})


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"])
def test_a_port_that_is_no_number_is_refused_naming_the_variable(variable: str) -> None:
    with pytest.raises(TelemetryConfigError, match=f"^{variable}=.*port is not a number"):
        exporter_settings({variable: "http://collector:43x8"})


@pytest.mark.parametrize("variable", ["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"])
def test_an_otel_sampler_is_refused_pointing_at_serves_ratio(variable: str) -> None:
    with pytest.raises(TelemetryConfigError, match=f"^{variable} is set.*RAY_SERVE_TRACING_SAMPLING_RATIO"):
        exporter_settings({variable: "always_on"})


def test_the_process_environment_is_read_when_none_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_otel(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://from-env:1234/v1/traces")
    assert exporter_settings().endpoint == "http://from-env:1234/v1/traces"


def test_without_a_timeout_variable_the_settings_have_none() -> None:
    assert exporter_settings({}).timeout_s is None


def test_the_traces_timeout_outranks_the_general_one() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2.5", "OTEL_EXPORTER_OTLP_TIMEOUT": "30"}
    assert exporter_settings(env).timeout_s == 2.5
    assert exporter_settings({"OTEL_EXPORTER_OTLP_TIMEOUT": "30"}).timeout_s == 30.0


@pytest.mark.parametrize("variable", exporter.TIMEOUT_VARIABLES)
@pytest.mark.parametrize("value", ["0", "-1", "ten", "", "inf", "nan"])
def test_a_timeout_that_is_no_positive_number_is_refused_naming_the_variable(
    variable: str, value: str
) -> None:
    with pytest.raises(TelemetryConfigError, match=f"^{variable}={value!r}: .*positive number of seconds"):
        exporter_settings({variable: value})


def test_a_bad_general_timeout_is_refused_even_beside_a_good_traces_one() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3", "OTEL_EXPORTER_OTLP_TIMEOUT": "3s"}
    with pytest.raises(TelemetryConfigError, match="^OTEL_EXPORTER_OTLP_TIMEOUT='3s'"):
        exporter_settings(env)


@pytest.mark.parametrize("protocol", exporter.PROTOCOLS)
@pytest.mark.parametrize(
    ("env", "timeout_s"),
    [
        ({}, exporter.EXPORT_TIMEOUT_S),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "7"}, 7.0),
        ({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "12", "OTEL_EXPORTER_OTLP_TIMEOUT": "7"}, 12.0),
    ],
)
def test_the_exporter_waits_as_long_as_the_timeout_variables_say(
    monkeypatch: pytest.MonkeyPatch, protocol: str, env: dict[str, str], timeout_s: float
) -> None:
    """Without a variable the exporter is given ``EXPORT_TIMEOUT_S``; with one it is given none, and
    reads the variable itself (an argument would outrank it)."""
    _clear_otel(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    made = exporter._exporter(exporter_settings())
    try:
        holder = made._client if protocol == "http/protobuf" else made  # HTTP: its client's timeout
        assert holder._timeout == timeout_s
    finally:
        made.shutdown()


def test_a_grpc_endpoint_over_http_is_an_insecure_grpc_exporter() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    made = exporter._exporter(ExporterSettings("grpc", "http://127.0.0.1:4317"))
    try:
        assert isinstance(made, OTLPSpanExporter)
    finally:
        made.shutdown()


# --- the exporter, against a real receiver -----------------------------------------------------------


class Recorder:
    """Stands for the Prometheus counter: each ``inc`` as (value, tags)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, str]]] = []

    def inc(self, value: int, tags: dict[str, str]) -> None:
        self.calls.append((value, dict(tags)))

    def total(self, reason: str) -> int:
        return sum(value for value, tags in self.calls if tags == {"reason": reason})


class RecordedDrops(exporter.DropCount):
    """The exporter's drop count, its metric a ``Recorder``."""

    def __init__(self) -> None:
        super().__init__()
        self.recorder = Recorder()

    def _metric(self) -> Recorder:
        return self.recorder


@pytest.fixture
def drops(monkeypatch: pytest.MonkeyPatch) -> RecordedDrops:
    """A fresh drop count in place of the process's."""
    fresh = RecordedDrops()
    monkeypatch.setattr(exporter, "DROPS", fresh)
    return fresh


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def _clear_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every OTEL_* variable unset for the test and restored after it, even one the code under test
    sets (``span_processors`` sets OTEL_SERVICE_NAME when it is unset)."""
    for name in OTEL_VARIABLES:
        monkeypatch.setenv(name, "placeholder")  # recorded, so the value at the end is undone too
        monkeypatch.delenv(name)


def _provider(monkeypatch: pytest.MonkeyPatch, endpoint: str, **env: str) -> TracerProvider:
    """A local tracer provider (never the global one) with the exporter's processors sending to
    ``endpoint``, made after them as Ray makes it."""
    _clear_otel(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    processors = exporter.span_processors()
    provider = TracerProvider()
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _end_quickly(tracer: Any, count: int, within_s: float = 0.5) -> None:
    """End ``count`` spans, all of them within ``within_s`` (failing at the first that is late)."""
    started = time.monotonic()
    for index in range(count):
        tracer.start_span(f"span {index}").end()
        assert time.monotonic() - started < within_s, f"{index + 1} span(s) took over {within_s}s"


def _named(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.name: span for span in spans}


def test_spans_reach_the_collector_with_their_attributes_parents_and_service_name(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, drops: RecordedDrops
) -> None:
    provider = _provider(monkeypatch, receiver.endpoint)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request", attributes={"mai.route": "small", "mai.stages": 2}):
        with tracer.start_as_current_span("mai.stage first", attributes={"mai.constrained": True}):
            pass
    assert provider.force_flush()
    spans = _named(receiver.wait_for(lambda got: len(got) == 2))
    request, stage = spans["request"], spans["mai.stage first"]
    assert request.attributes == {"mai.route": "small", "mai.stages": 2}
    assert stage.attributes == {"mai.constrained": True}
    assert stage.trace_id == request.trace_id and stage.parent_span_id == request.span_id
    assert request.parent_span_id == ""
    assert {span.resource["service.name"] for span in spans.values()} == {"mai-serve"}
    assert request.end_ns >= stage.end_ns >= stage.start_ns >= request.start_ns > 0
    assert drops.total == 0
    provider.shutdown()


def test_an_operators_service_name_and_resource_attributes_are_kept(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver
) -> None:
    provider = _provider(
        monkeypatch,
        receiver.endpoint,
        OTEL_SERVICE_NAME="vqa-prod",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=prod",
    )
    provider.get_tracer("test").start_span("one").end()
    assert provider.force_flush()
    (span,) = receiver.wait_for(lambda got: len(got) == 1)
    assert span.resource["service.name"] == "vqa-prod"
    assert span.resource["deployment.environment"] == "prod"
    provider.shutdown()


def test_gzip_compressed_exports_are_received(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver
) -> None:
    provider = _provider(monkeypatch, receiver.endpoint, OTEL_EXPORTER_OTLP_TRACES_COMPRESSION="gzip")
    tracer = provider.get_tracer("test")
    for index in range(3):
        tracer.start_span(f"span {index}", attributes={"index": index}).end()
    assert provider.force_flush()
    spans = receiver.wait_for(lambda got: len(got) == 3)
    assert sorted(span.attributes["index"] for span in spans) == [0, 1, 2]
    provider.shutdown()


def test_an_unreachable_collector_never_delays_a_span_and_its_spans_are_counted(
    monkeypatch: pytest.MonkeyPatch, drops: RecordedDrops
) -> None:
    provider = _provider(monkeypatch, f"http://127.0.0.1:{_closed_port()}/v1/traces")
    tracer = provider.get_tracer("test")
    _end_quickly(tracer, 50)  # the exporter's timeout is 5 s: no span waited on it
    flushing = time.monotonic()
    provider.force_flush()
    assert time.monotonic() - flushing < exporter.EXPORT_TIMEOUT_S + 2  # it gives up within its timeout
    assert drops.total == 50
    assert drops.recorder.total("export_failed") == 50
    provider.shutdown()


def test_a_collector_that_refuses_the_export_has_its_spans_counted(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, drops: RecordedDrops
) -> None:
    receiver.status = 400  # not retried by the exporter
    provider = _provider(monkeypatch, receiver.endpoint)
    tracer = provider.get_tracer("test")
    for index in range(3):
        tracer.start_span(f"span {index}").end()
    provider.force_flush()
    assert receiver.requests == 1 and receiver.spans() == []
    assert drops.recorder.calls == [(3, {"reason": "export_failed"})]
    provider.shutdown()


def test_a_slow_collector_never_delays_a_span(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, drops: RecordedDrops
) -> None:
    receiver.delay_s = 1.0
    provider = _provider(monkeypatch, receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY="1")
    tracer = provider.get_tracer("test")
    tracer.start_span("first").end()
    receiver.wait_for(lambda _: receiver.requests == 1)  # the first export is being held
    _end_quickly(tracer, 50)
    receiver.delay_s = 0.0
    assert provider.force_flush()
    assert len(receiver.wait_for(lambda got: len(got) == 51)) == 51
    assert drops.total == 0
    provider.shutdown()


class BlockingExporter(SpanExporter):
    """An exporter whose every export waits until released: a collector that never answers."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(10)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_full_queue_turns_spans_away_counted_as_queue_full(drops: RecordedDrops) -> None:
    blocking = BlockingExporter()
    processor: Any = exporter._queue_bound()(
        blocking, max_queue_size=2, max_export_batch_size=2, schedule_delay_millis=60000
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    for index in range(2):  # a full batch: the worker takes it and blocks in the export
        tracer.start_span(f"taken {index}").end()
    assert blocking.entered.wait(5)
    started = time.monotonic()
    for index in range(5):  # two fill the queue again; three find it full
        tracer.start_span(f"queued {index}").end()
    assert time.monotonic() - started < 0.5
    assert drops.total == 3
    assert drops.recorder.calls == [(1, {"reason": "queue_full"})] * 3
    blocking.release.set()
    provider.shutdown()
    assert blocking.exported == 4
